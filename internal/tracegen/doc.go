// Command tracegen synthesizes a large Kineto trace for parser benchmarks by
// replicating the events of a real trace, shifting timestamps and ids so that
// every replica is a distinct, later copy:
//
//	go run ./internal/tracegen -o /tmp/big.json -size 1GB [-src trace.json.gz]
//
// The output follows Kineto's layout (one event per "\n  {" line, metadata
// before traceEvents). Generated files are not committed.
package main
