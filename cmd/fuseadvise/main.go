// Command fuseadvise reads PyTorch profiler traces, finds chains of ops worth fusing,
// writes fused Triton kernels for them, verifies the kernels in Triton's interpreter and
// measures them on a GPU. See doc.go, or run "fuseadvise help".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fuseadvise/fuseadvise/internal/safefile"
)

// stopSignals are the signals that cancel a command instead of killing it, so that it
// removes what it was writing (an output folder's temporary sibling, a temporary file) and
// exits 130: Ctrl-C, and SIGTERM as kill, timeout, a scheduler or a container runtime sends.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// notifyContext is the context main runs a command under: cancelled by stopSignals.
func notifyContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), stopSignals...)
}

// graceAfterSignal is how long a command may take to unwind after a signal (the stages that
// watch their context stop their subprocesses and remove their temporaries themselves)
// before main removes what is still being written and exits.
const graceAfterSignal = 3 * time.Second

const interruptedMsg = "fuseadvise: interrupted (nothing was left half-written)"

func main() {
	ctx, stop := notifyContext()
	env := &Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin}
	code := runUntilStopped(ctx, env.Stderr, graceAfterSignal, func() int { return Main(ctx, env, os.Args[1:]) }, safefile.RemoveTemporaries)
	stop()
	os.Exit(code)
}

// runUntilStopped runs cmd and returns its exit status. When ctx is cancelled (a signal) and
// cmd has not returned within grace (a stage that does not watch its context: parsing a
// large trace, writing folders), it calls removeTemps (safefile.RemoveTemporaries: no
// .DIR.tmp-* folder or temporary file stays behind), says so and returns 130 at once.
func runUntilStopped(ctx context.Context, stderr io.Writer, grace time.Duration, cmd func() int, removeTemps func()) int {
	done := make(chan int, 1)
	go func() { done <- cmd() }()
	select {
	case code := <-done:
		return code
	case <-ctx.Done():
	}
	select {
	case code := <-done:
		return code
	case <-time.After(grace):
	}
	removeTemps()
	fmt.Fprintln(stderr, interruptedMsg)
	return 130
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
		fmt.Fprintln(env.Stderr, interruptedMsg)
		return 130
	}
	fmt.Fprintf(env.Stderr, "fuseadvise: %v\n", err)
	if u, ok := err.(*usageError); ok && u.cmd != nil {
		fmt.Fprintf(env.Stderr, "usage: fuseadvise %s\nRun 'fuseadvise help %s' for details.\n", u.cmd.UsageLine, u.cmd.Name)
	}
	return exitCode(err)
}
