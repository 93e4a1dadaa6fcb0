package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/payment"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/worker"
)

// appSettings are the settings shared by `worker run` and the Lambda mode.
type appSettings struct {
	table, keyPrefix, providerURL, providerKey, keyFrom, logLevel *string
	retention, providerTimeout, keyLifetime                       *time.Duration
	providerAttempts                                              *int
	lookup                                                        *bool
	ledger                                                        ledgerSettings
}

func defineApp(s *settings) *appSettings {
	return &appSettings{
		table:            s.String("claim-table", "CLAIM_TABLE", "", "DynamoDB claim table (required)"),
		keyPrefix:        s.String("claim-key-prefix", "CLAIM_KEY_PREFIX", "", "prefix for claim keys, when consumers share a table"),
		providerURL:      s.String("provider-url", "PROVIDER_URL", "", "payment provider base URL (required)"),
		providerKey:      s.String("provider-api-key", "PROVIDER_API_KEY", "", "payment provider API key, sent as a bearer token"),
		keyFrom:          s.String("key-from", "IDEMPOTENCY_KEY_FROM", "payment_id", "idempotency key: payment_id, message_id, attribute:NAME or jmespath:EXPR"),
		logLevel:         s.String("log-level", "LOG_LEVEL", "info", "debug, info, warn or error"),
		retention:        s.Duration("claim-retention", "CLAIM_RETENTION", 0, "how long completed keys are remembered (default: queue retention + DLQ retention + 24h)"),
		providerTimeout:  s.Duration("provider-timeout", "PROVIDER_TIMEOUT", 10*time.Second, "per-request timeout to the provider"),
		providerAttempts: s.Int("provider-attempts", "PROVIDER_ATTEMPTS", 4, "attempts per charge, with the same key, before the message is retried"),
		keyLifetime:      s.Duration("provider-key-lifetime", "PROVIDER_KEY_LIFETIME", payment.DefaultKeyLifetime, "how long the provider remembers an idempotency key; later retries are looked up first"),
		lookup:           s.Bool("provider-lookup", "PROVIDER_LOOKUP", true, "look a payment up at the provider before retrying it past the key lifetime (false: set it aside to reconcile)"),
		ledger:           defineLedger(s),
	}
}

// app is what the settings build: logger, claim store, handler and decoder.
type app struct {
	log         *slog.Logger
	aws         aws.Config
	store       *dynamo.Store
	client      *provider.Client
	handler     worker.Handler
	decoder     worker.Decoder
	keyLifetime time.Duration
	tracing     *tracing // OTEL_*: off unless they turn it on
}

// warnKeyLifetime says at start when a message can be retried after the
// provider has forgotten its key: queue retention plus the dead-letter
// queue's exceeds the key lifetime.
func (a *app) warnKeyLifetime(q worker.QueueInfo) {
	if a.client == nil {
		return // no provider (HANDLER=ledger)
	}
	if longest := q.Retention + q.DeadLetterRetention; longest > a.keyLifetime {
		a.log.Warn("a retry can come after the provider has forgotten its key; late retries are looked up before charging, or set aside to reconcile",
			slog.String("provider_key_lifetime", a.keyLifetime.String()),
			slog.String("queue_retention", q.Retention.String()), slog.String("dlq_retention", q.DeadLetterRetention.String()))
	}
}

func (a *appSettings) build(ctx context.Context, io stdio) (*app, error) {
	if err := require(*a.table, "claim-table", "CLAIM_TABLE"); err != nil {
		return nil, err
	}
	if isLedger, err := a.ledger.ledger(); isLedger || err != nil {
		if err != nil {
			return nil, err
		}
		return a.buildLedger(ctx, io)
	}
	if err := require(*a.providerURL, "provider-url", "PROVIDER_URL"); err != nil {
		return nil, err
	}
	log, err := a.logger(io)
	if err != nil {
		return nil, err
	}
	if *a.providerTimeout <= 0 {
		return nil, usagef("PROVIDER_TIMEOUT (-provider-timeout) %s: must be positive", *a.providerTimeout)
	}
	if *a.providerAttempts < 1 {
		return nil, usagef("PROVIDER_ATTEMPTS (-provider-attempts) %d: must be at least 1", *a.providerAttempts)
	}
	if *a.keyLifetime <= 0 {
		return nil, usagef("PROVIDER_KEY_LIFETIME (-provider-key-lifetime) %s: must be positive", *a.keyLifetime)
	}
	keyFrom, err := payment.ParseKeySource(*a.keyFrom)
	if err != nil {
		return nil, usagef("IDEMPOTENCY_KEY_FROM (-key-from): %v", err)
	}
	decoder, err := payment.NewDecoder(keyFrom)
	if err != nil {
		return nil, usagef("IDEMPOTENCY_KEY_FROM (-key-from): %v", err)
	}
	client, err := provider.NewClient(provider.Config{
		BaseURL: *a.providerURL, Timeout: *a.providerTimeout, MaxAttempts: *a.providerAttempts, APIKey: *a.providerKey,
		Logger: log,
	})
	if err != nil {
		return nil, usagef("PROVIDER_URL (-provider-url): %v", err)
	}
	cfg, tr, store, err := a.claimStore(ctx, io)
	if err != nil {
		return nil, err
	}
	h := payment.Handler{Provider: client, KeyLifetime: *a.keyLifetime}
	if *a.lookup {
		h.Lookup = client
	}
	return &app{
		log: log, aws: cfg, store: store, client: client, tracing: tr,
		handler: h, decoder: decoder, keyLifetime: *a.keyLifetime,
	}, nil
}

// logger checks the settings every handler shares (LOG_LEVEL,
// CLAIM_RETENTION) and returns the JSON logger on stderr.
func (a *appSettings) logger(io stdio) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(*a.logLevel)); err != nil {
		return nil, usagef("LOG_LEVEL (-log-level) %q: want debug, info, warn or error", *a.logLevel)
	}
	if *a.retention < 0 {
		return nil, usagef("CLAIM_RETENTION (-claim-retention) %s: must not be negative", *a.retention)
	}
	return slog.New(slog.NewJSONHandler(io.stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: readableDurations})), nil
}

// claimStore loads the AWS configuration (with tracing) and returns the
// DynamoDB claim store on CLAIM_TABLE.
func (a *appSettings) claimStore(ctx context.Context, io stdio) (aws.Config, *tracing, *dynamo.Store, error) {
	cfg, tr, err := loadTracedAWS(ctx, io)
	if err != nil {
		return aws.Config{}, nil, nil, err
	}
	store, err := dynamo.New(dynamo.Config{Client: dynamodb.NewFromConfig(cfg, tr.dynamoDB), Table: *a.table, KeyPrefix: *a.keyPrefix})
	if err != nil {
		return aws.Config{}, nil, nil, usagef("CLAIM_TABLE: %v", err)
	}
	return cfg, tr, store, nil
}

// readableDurations writes durations in log lines as Go duration strings
// ("30s", "1.5s") rather than the JSON handler's nanoseconds.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// startError turns the worker's refusal to start into a usage error (exit
// 2) naming the setting; other errors pass through.
func startError(err error) error {
	var re *worker.RetentionError
	switch {
	case errors.As(err, &re):
		return usagef("CLAIM_RETENTION (-claim-retention): %v", re)
	case errors.Is(err, worker.ErrConfig):
		return usagef("%v", err)
	}
	return err
}

// loadTracedAWS is loadAWS with the OTEL_* settings' tracing set up; clients
// made with its dynamoDB and sqs options are traced by it (when they turn
// it on).
func loadTracedAWS(ctx context.Context, io stdio) (aws.Config, *tracing, error) {
	cfg, err := loadAWS(ctx)
	if err != nil {
		return aws.Config{}, nil, err
	}
	tr, err := newTracing(ctx, io.getenv, io.getenv("AWS_LAMBDA_RUNTIME_API") != "")
	if err != nil {
		return aws.Config{}, nil, err
	}
	return cfg, tr, nil
}

// loadAWS reads the SDK's standard configuration chain.
func loadAWS(ctx context.Context) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(worker.HTTPClient(256)))
	if err != nil {
		return aws.Config{}, usagef("AWS configuration: %v", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, usagef("AWS_REGION is not set (nor a region in the AWS config file)")
	}
	return cfg, nil
}

func cmdRun(ctx context.Context, args []string, io stdio) error {
	s := newSettings("run", io)
	queueURL := s.String("queue-url", "QUEUE_URL", "", "source SQS queue URL (required)")
	concurrency := s.Int("concurrency", "WORKER_CONCURRENCY", 16, "messages processed at once")
	visibility := s.Duration("visibility-timeout", "VISIBILITY_TIMEOUT", 0, "lease length and visibility timeout per receive (default: the queue's)")
	shutdown := s.Duration("shutdown-timeout", "SHUTDOWN_TIMEOUT", 30*time.Second, "how long SIGTERM waits for in-flight messages")
	metricsAddr := s.String("metrics-addr", "METRICS_ADDR", "", "serve /metrics, /healthz and /readyz here (empty: off)")
	owner := s.String("owner", "WORKER_OWNER", "", "name of this instance in claims (default: host/pid/random)")
	outageCover := s.Duration("outage-cover", "OUTAGE_COVER", 0, "dependency outage a message's receives must outlast before SQS may dead-letter it (default 1h)")
	holdFor := s.Duration("hold-for", "HOLD_FOR", 0, "how long a message is held, heartbeating, and retried in process before its receive is spent (default 15m)")
	breakerThreshold := s.Int("breaker-threshold", "BREAKER_THRESHOLD", 0, "dependency failures in a row that stop receiving (default 5)")
	probeInterval := s.Duration("probe-interval", "BREAKER_PROBE_INTERVAL", 0, "pause between probe receives while the breaker is open (default 2s)")
	a := defineApp(s)
	if err := s.Parse(args); err != nil {
		return err
	}
	if err := require(*queueURL, "queue-url", "QUEUE_URL"); err != nil {
		return err
	}
	if *concurrency < 1 {
		return usagef("WORKER_CONCURRENCY (-concurrency) %d: must be at least 1", *concurrency)
	}
	if *visibility < 0 || *visibility%time.Second != 0 || *visibility > worker.MaxVisibility {
		return usagef("VISIBILITY_TIMEOUT (-visibility-timeout) %s: must be whole seconds up to 12h", *visibility)
	}
	if *shutdown <= 0 {
		return usagef("SHUTDOWN_TIMEOUT (-shutdown-timeout) %s: must be positive", *shutdown)
	}
	for _, d := range []struct {
		v    time.Duration
		name string
	}{{*outageCover, "OUTAGE_COVER (-outage-cover)"}, {*holdFor, "HOLD_FOR (-hold-for)"}, {*probeInterval, "BREAKER_PROBE_INTERVAL (-probe-interval)"}} {
		if d.v < 0 {
			return usagef("%s %s: must not be negative", d.name, d.v)
		}
	}
	if *breakerThreshold < 0 {
		return usagef("BREAKER_THRESHOLD (-breaker-threshold) %d: must not be negative", *breakerThreshold)
	}
	ap, err := a.build(ctx, io)
	if err != nil {
		return err
	}
	defer ap.tracing.shutdown(ap.log)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := worker.NewMetrics(reg)

	// Reading the queue can take a while against a cold endpoint; SIGTERM
	// still ends it.
	w, err := worker.New(ctx, worker.Config{
		QueueURL: *queueURL, SQS: sqs.NewFromConfig(ap.aws, ap.tracing.sqs), Store: ap.store,
		Handler: ap.handler, Decoder: ap.decoder, Concurrency: *concurrency,
		VisibilityTimeout: *visibility, Retention: *a.retention, ShutdownTimeout: *shutdown,
		Owner: *owner, Logger: ap.log, Metrics: metrics, TracerProvider: ap.tracing.TracerProvider(),
		OutageCover: *outageCover, HoldFor: *holdFor, BreakerThreshold: *breakerThreshold, ProbeInterval: *probeInterval,
	})
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, worker.ErrConfig) {
			return nil // stopped while reading the queue
		}
		return startError(err)
	}

	ap.warnKeyLifetime(w.Queue())
	if ap.client != nil {
		registerProviderMetrics(reg, ap.client)
	}
	if *metricsAddr != "" {
		srv, err := serveMetrics(*metricsAddr, reg, w, ap.log)
		if err != nil {
			return usagef("METRICS_ADDR (-metrics-addr) %q: %v", *metricsAddr, err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	return w.Run(ctx)
}

// serveMetrics serves w.HTTPHandler: /metrics, /healthz (the process is up)
// and /readyz (polling, not stopping, and no dependency breaker open).
func serveMetrics(addr string, reg *prometheus.Registry, w *worker.Worker, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: w.HTTPHandler(reg), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", slog.Any("error", err))
		}
	}()
	log.Info("serving metrics", slog.String("addr", "http://"+strings.TrimPrefix(ln.Addr().String(), "http://")))
	return srv, nil
}

// registerProviderMetrics exports the provider client's attempt counters.
func registerProviderMetrics(reg prometheus.Registerer, c *provider.Client) {
	for _, m := range []struct {
		name, help string
		get        func(provider.ClientStats) int64
	}{
		{"claimfirst_provider_attempts_total", "HTTP requests sent to the payment provider.", func(s provider.ClientStats) int64 { return s.Attempts }},
		{"claimfirst_provider_retries_total", "Provider requests retried after an unknown outcome.", func(s provider.ClientStats) int64 { return s.Retries }},
		{"claimfirst_provider_exhausted_total", "Provider calls that gave up after their last attempt.", func(s provider.ClientStats) int64 { return s.Exhausted }},
	} {
		get := m.get
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help},
			func() float64 { return float64(get(c.Stats())) }))
	}
}
