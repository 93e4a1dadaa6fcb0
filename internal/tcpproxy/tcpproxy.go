package tcpproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards TCP connections from its own address to an upstream one,
// with faults injected by the test. Its methods are safe for concurrent use.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	conns  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

// link is one proxied connection: the client's side and the upstream's.
type link struct {
	client, server net.Conn

	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	done   bool // cut or closed: forward nothing more
}

// Start listens on 127.0.0.1 and forwards each connection to upstream
// (host:port), until Close.
func Start(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port, where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Conns is how many connections are open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s}
		l.cond = sync.NewCond(&l.mu)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.conns[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		var once sync.Once
		end := func() {
			once.Do(func() {
				l.close()
				p.mu.Lock()
				delete(p.conns, l)
				p.mu.Unlock()
			})
		}
		// A side that ends cleanly is passed on as a half-close, as a TCP
		// path does, and the link ends when both sides have; an error ends
		// it at once. Closing both at the first end would reset the other
		// side when its last bytes are still unread here.
		var left atomic.Int32
		left.Store(2)
		finish := func(dst net.Conn, eof bool) {
			if eof {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
			}
			if !eof || left.Add(-1) == 0 {
				end()
			}
		}
		go func() { defer p.wg.Done(); finish(s, l.pipe(s, c)) }()
		go func() { defer p.wg.Done(); finish(c, l.pipe(c, s)) }()
	}
}

// pipe copies from src to dst, holding each chunk (and the end of the
// stream) while the link is frozen; it reports whether src ended cleanly
// (EOF) and that end may be passed on.
func (l *link) pipe(dst, src net.Conn) (eof bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !l.wait() {
			return false
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err != nil {
			return errors.Is(err, io.EOF)
		}
	}
}

// wait blocks while the link is frozen and reports whether it may forward.
func (l *link) wait() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.frozen && !l.done {
		l.cond.Wait()
	}
	return !l.done
}

func (l *link) set(frozen, done bool) {
	l.mu.Lock()
	l.frozen = frozen
	l.done = l.done || done
	l.cond.Broadcast()
	l.mu.Unlock()
}

func (l *link) close() {
	l.set(false, true)
	_ = l.client.Close()
	_ = l.server.Close()
}

func (p *Proxy) each(f func(*link)) {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		f(l)
	}
}

// Freeze stops forwarding on every open connection, both ways, without
// closing anything, until Thaw or Cut.
func (p *Proxy) Freeze() { p.each(func(l *link) { l.set(true, false) }) }

// Thaw forwards again on every frozen connection, what was held first.
func (p *Proxy) Thaw() { p.each(func(l *link) { l.set(false, false) }) }

// Cut closes both sides of every open connection.
func (p *Proxy) Cut() {
	p.each(func(l *link) {
		l.close()
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
	})
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
