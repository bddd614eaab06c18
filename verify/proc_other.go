//go:build !unix

package verify

import "os/exec"

// setProcessGroup: cancellation kills the runner process itself (exec's default).
func setProcessGroup(cmd *exec.Cmd) {}
