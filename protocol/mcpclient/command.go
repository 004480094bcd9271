package mcpclient

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// process is a local server's process: its output to read, and its input
// to write, whose Close ends it as the MCP specification says: its input
// closed, then SIGTERM, then SIGKILL, each after a grace.
type process struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	stdin  io.WriteCloser
	grace  time.Duration
}

// startCommand starts the command args with the environment commandEnv
// makes of env, its standard error to stderr (nil: discarded).
func startCommand(args, env []string, stderr io.Writer) (*process, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env, cmd.Stderr = commandEnv(env), stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &process{cmd: cmd, stdout: stdout, stdin: stdin, grace: 2 * time.Second}, nil
}

func (p *process) Write(b []byte) (int, error) { return p.stdin.Write(b) }

// Close closes the process's input and waits for it to end, signalling it
// to when it does not.
func (p *process) Close() error {
	err := p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	wait := func() bool {
		select {
		case <-done:
			return true
		case <-time.After(p.grace):
			return false
		}
	}
	if wait() {
		return err
	}
	if p.cmd.Process.Signal(syscall.SIGTERM) == nil && wait() {
		return err
	}
	if kerr := p.cmd.Process.Kill(); kerr != nil {
		return errors.Join(err, kerr)
	}
	<-done
	return err
}

// inherited are the variables of the host's environment a local server
// gets besides Server.Env: those most programs need to start (the ones
// the official TypeScript SDK passes by default), none of them a secret.
var inherited = inheritedEnv()

func inheritedEnv() []string {
	if runtime.GOOS == "windows" {
		return []string{"APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PROCESSOR_ARCHITECTURE",
			"SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "USERNAME", "USERPROFILE", "PROGRAMFILES"}
	}
	return []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}
}

// commandEnv is a local server's environment: the host's inherited variables,
// then env (whose variables win).
func commandEnv(env []string) []string {
	out := make([]string, 0, len(inherited)+len(env))
	for _, k := range inherited {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return append(out, env...)
}
