//go:build linux

package verify

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// forkRunner is a Runner for the mutation suite: a zygote process imports torch, triton and
// the runner once, then forks a runner process per Start. Run starts a fresh runner after
// every folder where a case raised or wrote out of bounds (most killed mutants), and a fork
// costs milliseconds where a fresh interpreter spends about 2 CPU-seconds importing torch.
// A forked runner is the runner script's main() in a process that has only imported it, so
// it behaves like one started by execRunner (same arguments, environment and protocol; the
// zygote never runs a kernel).
//
// The pipes of each runner are created here and handed to the zygote over a Unix socket
// (SCM_RIGHTS); the zygote reports each runner's pid and, when it exits, its status.
type forkRunner struct {
	python string
	env    []string // the zygote's environment; Start with another falls back to execRunner
	exec   *execRunner

	mu    sync.Mutex // one fork request at a time
	cmd   *exec.Cmd
	sock  *os.File // our end of the socketpair
	pids  chan forkReply
	exits map[int]chan int
	emu   sync.Mutex // exits
	dead  chan struct{}
	err   error // why the zygote is gone
}

type forkReply struct {
	Pid   int    `json:"pid"`
	Exit  *int   `json:"exit"`
	Code  int    `json:"status"`
	Ready bool   `json:"ready"`
	Error string `json:"error"`
}

const zygotePy = `
import json, os, select, socket, sys, traceback
import importlib.util

sock = socket.socket(fileno=3)
out = os.fdopen(os.dup(1), "w", buffering=1)
spec = importlib.util.spec_from_file_location("fa_verify_runner", sys.argv[1])
runner = importlib.util.module_from_spec(spec)
sys.modules["fa_verify_runner"] = runner
spec.loader.exec_module(runner)
out.write(json.dumps({"ready": True}) + "\n")
children = set()
while True:
    ready, _, _ = select.select([sock], [], [], 0.05 if children else None)
    while children:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        children.discard(pid)
        out.write(json.dumps({"exit": pid, "status": os.waitstatus_to_exitcode(st)}) + "\n")
    if not ready:
        continue
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
    if not msg:
        break
    req = json.loads(msg)
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            os.setsid()
            sock.close()
            for i, fd in enumerate(fds):
                os.dup2(fd, i)
                os.close(fd)
            sys.stdin = os.fdopen(0, "r")
            sys.stdout = os.fdopen(1, "w", buffering=1)
            sys.stderr = os.fdopen(2, "w", buffering=1)
            rc = runner.main(req["args"]) or 0
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(rc)
    for fd in fds:
        os.close(fd)
    children.add(pid)
    out.write(json.dumps({"pid": pid}) + "\n")
`

// newForkRunner starts the zygote with python and the runner environment Run uses on the
// CPU; it is stopped when t ends.
func newForkRunner(t testing.TB, python string) Runner {
	t.Helper()
	dir := t.TempDir()
	script, err := writeRunner(dir)
	if err != nil {
		t.Fatal(err)
	}
	zygote := filepath.Join(dir, "zygote.py")
	if err := os.WriteFile(zygote, []byte(zygotePy), 0o644); err != nil {
		t.Fatal(err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "zygote-socket"), os.NewFile(uintptr(fds[1]), "zygote-socket")
	r := &forkRunner{python: python, env: runnerEnv(os.Environ(), true), sock: ours,
		pids: make(chan forkReply, 1), exits: map[int]chan int{}, dead: make(chan struct{}),
		exec: &execRunner{python: python, script: script}}
	r.cmd = exec.Command(python, zygote, script)
	r.cmd.Env = r.env
	r.cmd.ExtraFiles = []*os.File{theirs}
	r.cmd.Stderr = os.Stderr
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	go r.read(stdout)
	t.Cleanup(r.close)
	select {
	case rep := <-r.pids:
		if !rep.Ready {
			t.Fatalf("fork runner: zygote said %+v", rep)
		}
	case <-r.dead:
		t.Fatalf("fork runner: the zygote exited before it was ready: %v", r.err)
	case <-time.After(startupTimeout):
		t.Fatal("fork runner: the zygote did not start")
	}
	return r
}

// read dispatches the zygote's lines: ready and pid replies to r.pids, exit statuses to
// the waiting Proc.
func (r *forkRunner) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var rep forkReply
		if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
			continue
		}
		if rep.Exit != nil {
			r.emu.Lock()
			ch := r.exits[*rep.Exit]
			delete(r.exits, *rep.Exit)
			r.emu.Unlock()
			if ch != nil {
				ch <- rep.Code
			}
			continue
		}
		if rep.Pid > 0 {
			r.emu.Lock()
			r.exits[rep.Pid] = make(chan int, 1)
			r.emu.Unlock()
		}
		r.pids <- rep
	}
	r.err = fmt.Errorf("zygote ended: %v", r.cmd.Wait())
	close(r.dead)
}

func (r *forkRunner) close() {
	r.sock.Close() // the zygote exits at EOF
	select {
	case <-r.dead:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		<-r.dead
	}
}

func (r *forkRunner) Start(ctx context.Context, args, env []string) (*Proc, error) {
	if !slices.Equal(env, r.env) {
		return r.exec.Start(ctx, args, env)
	}
	// our ends and the runner's: its stdin (read), stdout and stderr (write)
	var ours, theirs [3]*os.File
	for i := range 3 {
		pr, pw, err := os.Pipe()
		if err != nil {
			closeAll(ours[:], theirs[:])
			return nil, err
		}
		if i == 0 {
			ours[i], theirs[i] = pw, pr
		} else {
			ours[i], theirs[i] = pr, pw
		}
	}
	req, _ := json.Marshal(map[string]any{"args": args})
	rights := syscall.UnixRights(int(theirs[0].Fd()), int(theirs[1].Fd()), int(theirs[2].Fd()))

	r.mu.Lock()
	err := syscall.Sendmsg(int(r.sock.Fd()), req, rights, nil, 0)
	var rep forkReply
	if err == nil {
		select {
		case rep = <-r.pids:
		case <-r.dead:
			err = r.err
		}
	}
	r.mu.Unlock()
	closeAll(theirs[:])
	if err != nil {
		closeAll(ours[:])
		return nil, fmt.Errorf("fork runner: %v", err)
	}
	pid := rep.Pid
	r.emu.Lock()
	exited := r.exits[pid]
	r.emu.Unlock()
	if exited == nil {
		closeAll(ours[:])
		return nil, fmt.Errorf("fork runner: bad reply %+v", rep)
	}

	tail := &tailBuffer{max: 8 << 10}
	copied := make(chan struct{})
	go func() {
		io.Copy(tail, ours[2])
		close(copied)
	}()
	status := make(chan int, 1)
	go func() {
		select {
		case code := <-exited:
			status <- code
		case <-ctx.Done():
			syscall.Kill(-pid, syscall.SIGKILL) // its process group (the runner called setsid)
			syscall.Kill(pid, syscall.SIGKILL)  // in case it had not yet
			select {
			case code := <-exited:
				status <- code
			case <-r.dead:
				status <- -int(syscall.SIGKILL)
			}
		case <-r.dead:
			status <- -1
		}
	}()
	wait := func() error {
		code := <-status
		ours[0].Close()
		select {
		case <-copied:
		case <-time.After(5 * time.Second):
		}
		ours[1].Close()
		ours[2].Close()
		if code == 0 {
			return nil
		}
		err := fmt.Errorf("exit status %d", code)
		if code < 0 {
			err = fmt.Errorf("signal: %s", syscall.Signal(-code))
		}
		if t := tail.lastLines(6); t != "" {
			return fmt.Errorf("%v; stderr ends:\n%s", err, t)
		}
		return err
	}
	return &Proc{Stdin: ours[0], Stdout: ours[1], Wait: wait}, nil
}

func closeAll(groups ...[]*os.File) {
	for _, g := range groups {
		for _, f := range g {
			if f != nil {
				f.Close()
			}
		}
	}
}
