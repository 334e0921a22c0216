package childproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/replicatorhq/replicator/internal/config"
)

// TailLines is how many of the log's last lines Exited quotes.
const TailLines = 10

// Config says what Start runs.
type Config struct {
	Exe  string   // the executable
	Args []string // its arguments
	Name string   // what messages call it: "master", "slave", "node2"
	// Log is the file that receives the child's standard output and
	// error; its directory is created.
	Log string
	// Append keeps what Log holds (a restarted node writes on in its old
	// log); false truncates it.
	Append bool
}

// Proc is a started child.
type Proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error // the exit status, valid once done is closed
}

// Start starts the child cfg describes.
func Start(cfg Config) (*Proc, error) {
	if err := os.MkdirAll(filepath.Dir(cfg.Log), 0o755); err != nil {
		return nil, fmt.Errorf("starting the %s: %w", cfg.Name, err)
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if cfg.Append {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(cfg.Log, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("starting the %s: %w", cfg.Name, err)
	}
	cmd := exec.Command(cfg.Exe, cfg.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if cmd.Env == nil {
		cmd.Env = []string{} // nil would hand the child the whole environment
	}
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the %s: %w", cfg.Name, err)
	}
	p := &Proc{name: cfg.Name, log: cfg.Log, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Name is the child's name in messages.
func (p *Proc) Name() string { return p.name }

// Log is the path of the child's log file.
func (p *Proc) Log() string { return p.log }

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the child.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Done is closed when the child has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the child's exit status (nil: exit code 0); valid once Done is
// closed.
func (p *Proc) Err() error { return p.err }

// Stop sends SIGTERM and waits for the exit, with SIGKILL after timeout. It
// returns nil when the child exited with code 0, else an error naming the
// child and its log that wraps the exit status (an *exec.ExitError).
func (p *Proc) Stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.exitErr()
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.exitErr()
	case <-t.C:
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("the %s did not stop within %s; killed (log %s)", p.name, timeout, p.log)
	}
}

func (p *Proc) exitErr() error {
	if p.err != nil {
		return fmt.Errorf("the %s exited with %w (log: %s)", p.name, p.err, p.log)
	}
	return nil
}

// Exited describes an exit the parent did not ask for, with the last
// TailLines lines of the child's log.
func (p *Proc) Exited() error {
	tail := ""
	if b, err := os.ReadFile(p.log); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > TailLines {
			lines = lines[len(lines)-TailLines:]
		}
		tail = "\n  " + strings.Join(lines, "\n  ")
	}
	return fmt.Errorf("the %s exited (%v); its log %s ends with:%s", p.name, p.err, p.log, tail)
}

// Poll calls cond every interval until it returns nil, p exits (Exited),
// ctx ends or timeout passes (an error wrapping cond's last one). p may be
// nil: a condition on several children, or on none.
func Poll(ctx context.Context, p *Proc, timeout, every time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	var done <-chan struct{}
	if p != nil {
		done = p.done
	}
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		t.Reset(every)
		select {
		case <-done:
			return p.Exited()
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if time.Now().After(deadline) {
			name := "the cluster"
			if p != nil {
				name = fmt.Sprintf("the %s (log %s)", p.name, p.log)
			}
			return fmt.Errorf("%s: not within %s: %w", name, timeout, err)
		}
	}
}

// ErrNotReady is what WaitReady's condition returns while /readyz does not
// answer 200.
var ErrNotReady = errors.New("not ready")

// WaitReady polls apiURL's /readyz with hc every interval until it
// answers 200 (Poll's rules for an exit, ctx and timeout).
func (p *Proc) WaitReady(ctx context.Context, hc *http.Client, apiURL string, timeout, every time.Duration) error {
	return Poll(ctx, p, timeout, every, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrNotReady, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%w: /readyz answers %s", ErrNotReady, resp.Status)
		}
		return nil
	})
}
