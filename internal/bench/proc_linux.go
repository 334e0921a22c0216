package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fdatasync makes f's data durable without its metadata.
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// memSample is one reading of /proc/PID/status, in bytes.
type memSample struct {
	hwm, rss, anon, file int64
}

// readMem reads VmHWM, VmRSS, RssAnon and RssFile of pid (0: this process).
func readMem(pid int) (memSample, error) {
	p := "/proc/self/status"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return memSample{}, err
	}
	var m memSample
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmHWM":
			dst = &m.hwm
		case "VmRSS":
			dst = &m.rss
		case "RssAnon":
			dst = &m.anon
		case "RssFile":
			dst = &m.file
		default:
			continue
		}
		f := strings.Fields(v) // "1234 kB"
		if len(f) == 2 && f[1] == "kB" {
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err == nil {
				*dst = n << 10
			}
		}
	}
	return m, nil
}

// resetPeak resets VmHWM of pid (0: this process) to its current RSS.
func resetPeak(pid int) error {
	p := "/proc/self/clear_refs"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/clear_refs"
	}
	return os.WriteFile(p, []byte("5"), 0)
}

// childrenOf lists the child processes of pid, whichever of its threads
// started them.
func childrenOf(pid int) []int {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// cpuTimes reads the machine's total and idle (+iowait) jiffies.
func cpuTimes() (total, idle int64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("bench: unexpected /proc/stat line %q", line)
	}
	for i, s := range f[1:] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("bench: /proc/stat: %w", err)
		}
		total += n
		if i == 3 || i == 4 {
			idle += n
		}
	}
	return total, idle, nil
}

// cpuTicks returns the user+system CPU time of pid (0: this process) in
// clock ticks.
func cpuTicks(pid int) (int64, error) {
	p := "/proc/self/stat"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: unexpected %s", p)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: unexpected %s", p)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: unexpected %s", p)
	}
	return u + s, nil
}
