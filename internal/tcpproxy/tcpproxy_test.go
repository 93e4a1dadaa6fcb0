package tcpproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/claimfirst/claimfirst/internal/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// upstream is a server that records what each connection sent and sees,
// line by line, and echoes each line back.
type upstream struct {
	ln    net.Listener
	lines chan string // every line received
	ends  chan error  // how each connection's read ended
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{ln: ln, lines: make(chan string, 16), ends: make(chan error, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						u.ends <- err
						return
					}
					u.lines <- line
					if _, err := c.Write([]byte(line)); err != nil {
						u.ends <- err
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return u
}

func start(t *testing.T, u *upstream) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.Start(u.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func dial(t *testing.T, p *tcpproxy.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	if _, err := c.Write([]byte(line)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := r.ReadString('\n')
	if err != nil || got != line {
		t.Fatalf("echo of %q = %q, %v", line, got, err)
	}
}

const quiet = 300 * time.Millisecond // how long "nothing happens" is watched

// TestFreeze: a frozen connection forwards nothing either way and passes
// no close on; a new connection flows; Thaw delivers what was held.
func TestFreeze(t *testing.T) {
	u := newUpstream(t)
	p := start(t, u)
	c, r := dial(t, p)
	roundTrip(t, c, r, "before\n")
	<-u.lines

	p.Freeze()
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-u.lines:
		t.Fatalf("upstream got %q through a frozen connection", l)
	case <-time.After(quiet):
	}
	_ = c.SetReadDeadline(time.Now().Add(quiet))
	if _, err := r.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a frozen connection: err = %v, want a timeout", err)
	}

	c2, r2 := dial(t, p) // connections opened after the freeze flow
	roundTrip(t, c2, r2, "fresh\n")
	if l := <-u.lines; l != "fresh\n" {
		t.Fatalf("upstream got %q, want the new connection's line", l)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-u.ends:
		t.Fatalf("upstream saw the frozen connection end (%v)", err)
	case <-time.After(quiet):
	}

	p.Thaw()
	if l := <-u.lines; l != "held\n" {
		t.Fatalf("after thaw upstream got %q, want the held line", l)
	}
	if err := <-u.ends; !errors.Is(err, io.EOF) {
		t.Fatalf("after thaw the client's close reached upstream as %v, want EOF", err)
	}
}

// TestCut: a cut connection ends on both sides.
func TestCut(t *testing.T) {
	u := newUpstream(t)
	p := start(t, u)
	c, r := dial(t, p)
	roundTrip(t, c, r, "hello\n")
	<-u.lines
	p.Cut()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("client read after a cut: err = %v, want the connection ended", err)
	}
	select {
	case err := <-u.ends:
		t.Logf("upstream saw the connection end: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("upstream did not see the cut connection end")
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("%d connections open after a cut, want 0", n)
	}
}
