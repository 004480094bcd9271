package plugins

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// limitSelf bounds the compiler process: its data segment (the Go heap,
// and the memory wazero compiles into) to what it uses now plus maxBytes,
// and its CPU time to cpuSeconds. Past either, the kernel stops it: an
// allocation fails (the Go runtime exits with "out of memory") or SIGXCPU
// kills it.
func limitSelf(maxBytes int64, cpuSeconds uint64) error {
	if maxBytes > 0 {
		used, err := vmData()
		if err != nil {
			return err
		}
		lim := used + uint64(maxBytes)
		if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: lim, Max: lim}); err != nil {
			return err
		}
	}
	if cpuSeconds > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: cpuSeconds, Max: cpuSeconds + 1}); err != nil {
			return err
		}
	}
	return nil
}

// vmData reads the process's data segment size, in bytes.
func vmData() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmData:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, sc.Err()
}

// killedForCPU reports whether the compiler process was killed by its CPU
// limit.
func killedForCPU(exit *exec.ExitError) bool {
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGXCPU
}

// maxRSS is the peak resident memory of an exited process, in bytes.
func maxRSS(exit *exec.ExitError) int64 {
	if ru, ok := exit.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return 0
}
