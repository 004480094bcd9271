//go:build !linux

package plugins

import "os/exec"

// limitSelf is a no-op where the compiler process's memory and CPU cannot
// be limited the Linux way: the compile deadline still stops it.
func limitSelf(maxBytes int64, cpuSeconds uint64) error { return nil }

// killedForCPU reports whether the compiler process was killed by its CPU
// limit: never, where there is none.
func killedForCPU(*exec.ExitError) bool { return false }

// maxRSS is the peak resident memory of an exited process: unknown here.
func maxRSS(*exec.ExitError) int64 { return 0 }
