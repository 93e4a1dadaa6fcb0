package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Server is a private PostgreSQL cluster for one test (initdb into
// t.TempDir(), a free 127.0.0.1 port, an unprivileged user when run as
// root), which the test can stop and start again. Tests that stop the
// database use it so the suite's shared server keeps running.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	port int
	cred *syscall.Credential
	cmd  *exec.Cmd
}

// NewServer starts a private cluster (skipped or failed like URL when
// PostgreSQL is not required) and stops it by PID when the test ends.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	URL(tb) // the same skip/fail rule as the shared server
	bin := os.Getenv("PG_BINDIR")
	if bin == "" {
		if p, err := exec.LookPath("initdb"); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				bin = filepath.Dir(r)
			}
		} else if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) > 0 {
			bin = filepath.Dir(m[len(m)-1])
		}
	}
	if bin == "" {
		tb.Fatal("initdb not found (set PG_BINDIR)")
	}
	dir, err := os.MkdirTemp("", "pgtest")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{tb: tb, bin: bin, dir: dir}
	if os.Getuid() == 0 {
		name := "postgres"
		if os.Getenv("PG_USER") != "" {
			name = os.Getenv("PG_USER")
		}
		u, err := user.Lookup(name)
		if err != nil {
			u, err = user.Lookup("nobody")
		}
		if err != nil {
			tb.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	init := s.command("initdb", "-D", filepath.Join(dir, "data"), "-U", "claimfirst", "--auth=trust", "--no-sync", "-E", "UTF8")
	if out, err := init.CombinedOutput(); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	tb.Cleanup(s.Stop)
	s.Start()
	return s
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	c := exec.Command(filepath.Join(s.bin, name), args...)
	c.Dir = s.dir
	if s.cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return c
}

// URL is the private server's connection string.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://claimfirst@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Start starts the server (again) and waits until it accepts connections.
func (s *Server) Start() {
	s.tb.Helper()
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o666)
	if err != nil {
		s.tb.Fatal(err)
	}
	defer log.Close()
	c := s.command("postgres", "-D", filepath.Join(s.dir, "data"), "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=100")
	c.Stdout, c.Stderr = log, log
	if err := c.Start(); err != nil {
		s.tb.Fatalf("start postgres: %v", err)
	}
	s.cmd = c
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if exec.CommandContext(ctx, filepath.Join(s.bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port)).Run() == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	s.tb.Fatalf("postgres not ready within 15s:\n%s", b)
}

// Stop stops the server by PID (fast shutdown, then SIGKILL) and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	c := s.cmd
	s.cmd = nil
	_ = c.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}
