package worker

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTPHandler returns an http.Handler for a transport's operational
// endpoints, the same for every broker:
//
//   - GET /metrics: the metrics g gathers, in the Prometheus text format.
//     A transport's metrics are registered only where Protocol.Metrics
//     says: NewMetrics(reg) registers them with reg, and the default
//     (Protocol.Metrics nil) registers them nowhere. Pass the same reg as
//     g. With g nil, /metrics serves m (claimfirst_*) alone, registered or
//     not.
//   - GET /healthz: 200 "ok" while the process serves at all (liveness).
//   - GET /readyz: 200 "ready" while ready returns nil; otherwise 503 with
//     its error ("starting", "stopping", which dependency's breaker is
//     open, the clock skew). ready's error is served to anyone who asks:
//     the endpoint is unauthenticated, so it names causes, never a
//     dependency's own error text (an AWS error names accounts and roles).
//     A load balancer or orchestrator takes an unready worker out of
//     rotation; it is not a reason to restart it.
//
// Mount it on a server of your own (its timeouts, its address). A
// transport has a method that calls it with its own readiness
// (sqsworker.Worker.HTTPHandler).
func HTTPHandler(ready func() error, g prometheus.Gatherer, m *Metrics) http.Handler {
	var opts promhttp.HandlerOpts
	if g == nil {
		reg := prometheus.NewRegistry()
		if m != nil {
			reg.MustRegister(m.collectors()...)
		}
		g = reg
	} else if r, ok := g.(prometheus.Registerer); ok {
		opts.Registry = r // counts promhttp's own errors there
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, opts))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(rw, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ready")
	})
	return mux
}

// Ready returns nil while the engine claims normally, and otherwise why
// not in words fit to serve on an unauthenticated endpoint: the clock
// skew, or which dependency's breaker is open (not its last error, which
// the breaker logged when it opened). A transport's readiness adds its own
// (starting, stopping).
func (e *Engine) Ready() error {
	if err := e.skew.err(); err != nil {
		return err
	}
	if open, dep, _ := e.breaker.state(); open {
		return fmt.Errorf("breaker open: %s keeps failing", dep)
	}
	return nil
}
