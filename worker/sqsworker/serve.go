package sqsworker

import (
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimfirst/claimfirst/worker"
)

// HTTPHandler returns w's operational endpoints, /metrics, /healthz and
// /readyz (worker.HTTPHandler), with w's readiness: /readyz answers 200
// "ready" once Run is polling, until Run's context ends, while the engine
// claims normally; otherwise 503 with the reason ("starting", "stopping",
// which dependency's breaker is open, or the clock skew). With g nil,
// /metrics serves w's own metrics (claimfirst_*) alone.
//
// Mount it on a server of your own (its timeouts, its address):
//
//	srv := &http.Server{Addr: ":9090", Handler: w.HTTPHandler(reg), ReadHeaderTimeout: 5 * time.Second}
func (w *Worker) HTTPHandler(g prometheus.Gatherer) http.Handler {
	return worker.HTTPHandler(w.readiness, g, w.cfg.Metrics)
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
	return w.proc.Ready()
}

var (
	errStarting = errors.New("starting")
	errStopping = errors.New("stopping")
)
