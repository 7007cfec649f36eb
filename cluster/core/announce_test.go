package core

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// announce prints a test's one-line summary where whoever ran `go test`
// sees it: go test shows a passing test's output only with -v, so without
// it the line goes to the go command's own output as well (Linux: the
// parent's standard output), printed just before its "ok" line.
func announce(line string) {
	fmt.Println(line)
	if testing.Verbose() {
		return
	}
	ppid := os.Getppid()
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	if err != nil || strings.TrimSpace(string(comm)) != "go" {
		return
	}
	if f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/1", ppid), os.O_WRONLY|os.O_APPEND, 0); err == nil {
		fmt.Fprintln(f, line)
		f.Close()
	}
}
