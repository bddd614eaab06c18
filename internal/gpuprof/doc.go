// Package gpuprof turns parsed traces into a pprof profile: the GPU time of every kernel,
// memcpy and memset attributed to the stack of CPU ops that launched it (Python frames on
// top when the trace has them), with the ops' own CPU time as a second sample type.
// Open the result with "go tool pprof -http=: FILE".
package gpuprof
