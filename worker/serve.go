package worker

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTPHandler returns an http.Handler for w's operational endpoints:
//
//   - GET /metrics: the metrics g gathers, in the Prometheus text format.
//     A Worker's metrics are registered only where Config.Metrics says:
//     NewMetrics(reg) registers them with reg, and the default
//     (Config.Metrics nil) registers them nowhere. Pass the same reg as g.
//     With g nil, /metrics serves w's own metrics (claimfirst_*) alone,
//     registered or not.
//   - GET /healthz: 200 "ok" while the process serves at all (liveness).
//   - GET /readyz: 200 "ready" once Run is polling, until Run's context
//     ends, while Health is nil; otherwise 503 with the reason ("starting",
//     "stopping", the open breaker's dependency and last error, or the
//     clock skew). A load
//     balancer or orchestrator takes an unready worker out of rotation; it
//     is not a reason to restart it.
//
// Mount it on a server of your own (its timeouts, its address):
//
//	srv := &http.Server{Addr: ":9090", Handler: w.HTTPHandler(reg), ReadHeaderTimeout: 5 * time.Second}
func (w *Worker) HTTPHandler(g prometheus.Gatherer) http.Handler {
	var opts promhttp.HandlerOpts
	if g == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(w.cfg.Metrics.collectors()...)
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
		if err := w.readiness(); err != nil {
			http.Error(rw, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ready")
	})
	return mux
}

// readiness returns why w is not ready, or nil.
func (w *Worker) readiness() error {
	select {
	case <-w.ready:
	default:
		return errStarting
	}
	select {
	case <-w.stop:
		return errStopping
	default:
	}
	return w.Health()
}

var (
	errStarting = errors.New("starting")
	errStopping = errors.New("stopping")
)
