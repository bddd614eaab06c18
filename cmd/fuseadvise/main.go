// Command fuseadvise reads PyTorch profiler traces, finds chains of ops worth fusing,
// writes fused Triton kernels for them, verifies the kernels in Triton's interpreter and
// measures them on a GPU. See doc.go, or run "fuseadvise help".
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// stopSignals are the signals that cancel a command instead of killing it, so that it
// removes what it was writing (an output folder's temporary sibling, a temporary file) and
// exits 130: Ctrl-C, and SIGTERM as kill, timeout, a scheduler or a container runtime sends.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// notifyContext is the context main runs a command under: cancelled by stopSignals.
func notifyContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), stopSignals...)
}

func main() {
	ctx, stop := notifyContext()
	env := &Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin}
	code := Main(ctx, env, os.Args[1:])
	stop()
	os.Exit(code)
}

// Main runs one command line and returns the exit status: 0 success, 1 a check that
// failed (verify, bench), 2 usage or input errors. Errors are printed once, here.
func Main(ctx context.Context, env *Env, args []string) (code int) {
	defer func() {
		// A panic is a bug in fuseadvise, never the user's fault: say so in one line.
		if r := recover(); r != nil {
			fmt.Fprintf(env.Stderr, "fuseadvise: internal error: %v (please report it with the command line)\n", r)
			code = 2
		}
	}()
	err := dispatch(ctx, env, args)
	if err == nil {
		return 0
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintln(env.Stderr, "fuseadvise: interrupted (nothing was left half-written)")
		return 130
	}
	fmt.Fprintf(env.Stderr, "fuseadvise: %v\n", err)
	if u, ok := err.(*usageError); ok && u.cmd != nil {
		fmt.Fprintf(env.Stderr, "usage: fuseadvise %s\nRun 'fuseadvise help %s' for details.\n", u.cmd.UsageLine, u.cmd.Name)
	}
	return exitCode(err)
}
