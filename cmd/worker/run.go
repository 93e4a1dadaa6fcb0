package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/queue"
	"github.com/claimfirst/claimfirst/origin"
	"github.com/claimfirst/claimfirst/payment"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// appSettings are the settings shared by `worker run` and the Lambda mode.
type appSettings struct {
	table, keyPrefix, providerURL, keyFrom, logLevel, providerKeySecret *string
	providerKey                                                         *secret
	retention, providerTimeout, keyLifetime                             *time.Duration
	providerAttempts                                                    *int
	lookup, allowHTTP, strict                                           *bool
	// broker is the broker `worker run` consumes (sqsChoice for the
	// Lambda mode): on Kafka and RabbitMQ with PostgreSQL's claims nothing
	// needs an AWS region.
	broker namedSetting
	ledger ledgerSettings
	pg     pgSettings
	origin originSettings
}

func defineApp(s *settings) *appSettings {
	return &appSettings{
		table:             s.String("claim-table", "CLAIM_TABLE", "", "DynamoDB claim table (required)"),
		keyPrefix:         s.String("claim-key-prefix", "CLAIM_KEY_PREFIX", "", "prefix for claim keys, when consumers share a table"),
		providerURL:       s.String("provider-url", "PROVIDER_URL", "", "payment provider base URL (required)"),
		allowHTTP:         s.Bool("provider-allow-http", "PROVIDER_ALLOW_HTTP", false, "send the API key over plain http to a host other than loopback (unsafe)"),
		providerKeySecret: s.String("provider-api-key-secret", "PROVIDER_API_KEY_SECRET", "", "Secrets Manager secret (name or ARN) holding the provider API key, read at start instead of PROVIDER_API_KEY"),
		providerKey:       s.Secret("provider-api-key", "PROVIDER_API_KEY", "payment provider API key, sent as a bearer token; never printed"),
		keyFrom:           s.String("key-from", "IDEMPOTENCY_KEY_FROM", "payment_id", "idempotency key: payment_id, message_id, attribute:NAME or jmespath:EXPR"),
		logLevel:          s.String("log-level", "LOG_LEVEL", "info", "debug, info, warn or error"),
		retention:         s.Duration("claim-retention", "CLAIM_RETENTION", 0, "how long completed keys are remembered (default: SQS the queue's retention + the DLQ's + 24h; Kafka the topic's retention.ms + HOLD_FOR + lease + 1h; RabbitMQ: required)"),
		providerTimeout:   s.Duration("provider-timeout", "PROVIDER_TIMEOUT", 10*time.Second, "per-request timeout to the provider"),
		providerAttempts:  s.Int("provider-attempts", "PROVIDER_ATTEMPTS", 4, "attempts per charge, with the same key, before the message is retried"),
		keyLifetime:       s.Duration("provider-key-lifetime", "PROVIDER_KEY_LIFETIME", payment.DefaultKeyLifetime, "how long the provider remembers an idempotency key; later retries are looked up first"),
		lookup:            s.Bool("provider-lookup", "PROVIDER_LOOKUP", true, "look a payment up at the provider before retrying it past the key lifetime (false: set it aside to reconcile)"),
		ledger:            defineLedger(s),
		pg:                definePostgres(s),
		origin:            defineOrigin(s),
		broker:            sqsChoice,
		strict:            s.Bool("payment-strict", "PAYMENT_STRICT", false, "dead-letter payment messages with fields other than payment_id, amount and currency (false: ignore them, logging each name once)"),
	}
}

// app is what the settings build: logger, claim store, handler and decoder.
type app struct {
	log         *slog.Logger
	aws         aws.Config
	store       claimstore.Store
	pgApp       // STORE=postgres: the pool and the sweeper
	client      *provider.Client
	handler     worker.Handler
	decoder     worker.Decoder
	keyLifetime time.Duration
	lookup      bool     // PROVIDER_LOOKUP
	tracing     *tracing // OTEL_*: off unless they turn it on
	originID    origin.Secret
}

// warnKeyLifetime says at start when a message can be retried after the
// provider has forgotten its key: queue retention plus the dead-letter
// queue's exceeds the key lifetime.
func (a *app) warnKeyLifetime(q sqsworker.QueueInfo) {
	if a.client == nil {
		return // no provider (HANDLER=ledger)
	}
	if longest := q.Retention + q.DeadLetterRetention; longest > a.keyLifetime {
		// With the lookup on (the default) a late retry is looked up before
		// charging: a notice. Without it, late retries are set aside.
		level, msg := slog.LevelInfo, "a retry can come after the provider has forgotten its key; late retries are looked up before charging"
		if !a.lookup {
			level, msg = slog.LevelWarn, "a retry can come after the provider has forgotten its key, and PROVIDER_LOOKUP is off: late retries are dead-lettered to reconcile by hand"
		}
		a.log.Log(context.Background(), level, msg,
			slog.String("provider_key_lifetime", a.keyLifetime.String()),
			slog.String("queue_retention", q.Retention.String()), slog.String("dlq_retention", q.DeadLetterRetention.String()))
	}
}

func (a *appSettings) build(ctx context.Context, io stdio) (*app, error) {
	if isPG, err := a.pg.postgres(); err != nil {
		return nil, err
	} else if !isPG {
		if err := require(*a.table, "claim-table", "CLAIM_TABLE"); err != nil {
			return nil, err
		}
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
	if a.providerKey.Value() != "" && *a.providerKeySecret != "" {
		return nil, usagef("PROVIDER_API_KEY and PROVIDER_API_KEY_SECRET are both set: give the key one way")
	}
	hasKey := a.providerKey.Value() != "" || *a.providerKeySecret != ""
	if err := checkProviderURL(*a.providerURL, hasKey, *a.allowHTTP); err != nil {
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
	decoder.Strict, decoder.Logger = *a.strict, log
	pcfg := provider.Config{
		BaseURL: *a.providerURL, Timeout: *a.providerTimeout, MaxAttempts: *a.providerAttempts, APIKey: a.providerKey.Value(),
		Logger: log,
	}
	client, err := provider.NewClient(pcfg)
	if err != nil {
		return nil, usagef("PROVIDER_URL (-provider-url): %v", err)
	}
	cfg, tr, store, err := a.claimStore(ctx, io)
	if err != nil {
		return nil, err
	}
	if *a.providerKeySecret != "" {
		key, err := readSecret(ctx, secretsmanager.NewFromConfig(cfg), *a.providerKeySecret)
		if err != nil {
			return nil, err
		}
		pcfg.APIKey = key.Value()
		if client, err = provider.NewClient(pcfg); err != nil {
			return nil, usagef("PROVIDER_API_KEY_SECRET: %v", err)
		}
	}
	ap := &app{log: log, aws: cfg, tracing: tr}
	if ap.originID, err = a.origin.secret(ctx, cfg); err != nil {
		return nil, err
	}
	switch {
	case keyFrom == payment.KeyMessageID && a.broker == kafkaChoice:
		log.Warn("IDEMPOTENCY_KEY_FROM=message_id on Kafka keys a record by its offset (topic/partition/offset): " +
			"it catches a redelivery, not a producer's retry, which lands at a new offset; key by payment_id")
	case keyFrom == payment.KeyMessageID && ap.originID == "" && a.broker == sqsChoice:
		log.Warn("IDEMPOTENCY_KEY_FROM=message_id without ORIGINAL_ID_SECRET: a redriven message is keyed by its new id, " +
			"so a dead letter moved back by worker redrive can run again; set ORIGINAL_ID_SECRET (the same for every worker and the redrive)")
	}
	ap.setStore(store)
	h := payment.Handler{Provider: client, KeyLifetime: *a.keyLifetime}
	if *a.lookup {
		h.Lookup = client
	}
	ap.client, ap.handler, ap.keyLifetime, ap.lookup = client, h, *a.keyLifetime, *a.lookup
	ap.decoder = decoder
	return ap, nil
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
// claim store on CLAIM_TABLE: DynamoDB's, or PostgreSQL's for STORE=postgres.
func (a *appSettings) claimStore(ctx context.Context, io stdio) (aws.Config, *tracing, claimstore.Store, error) {
	isPG, _ := a.pg.postgres()
	// Kafka or RabbitMQ with PostgreSQL's claims may run without AWS at
	// all: the region is then needed only to read a secret from Secrets
	// Manager, whose call says so.
	cfg, tr, err := loadTracedAWS(ctx, io, isPG && a.broker != sqsChoice)
	if err != nil {
		return aws.Config{}, nil, nil, err
	}
	if isPG {
		store, _, err := a.pg.postgresStore(ctx, *a.table, *a.keyPrefix)
		if err != nil {
			return aws.Config{}, nil, nil, err
		}
		return cfg, tr, store, nil
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
	var re *queue.RetentionError
	switch {
	case errors.As(err, &re):
		return usagef("CLAIM_RETENTION (-claim-retention): %v", re)
	case errors.Is(err, kafkaworker.ErrRetention):
		return usagef("CLAIM_RETENTION (-claim-retention): %v", unprefixed(err.Error()))
	case errors.Is(err, worker.ErrConfig):
		return reword(err, append(kafkaSettings, rabbitSettings...)...)
	}
	return err
}

// loadTracedAWS is loadAWS with the OTEL_* settings' tracing set up; clients
// made with its dynamoDB and sqs options are traced by it (when they turn
// it on).
func loadTracedAWS(ctx context.Context, io stdio, regionOptional bool) (aws.Config, *tracing, error) {
	cfg, err := loadAWSConfig(ctx, regionOptional)
	if err != nil {
		return aws.Config{}, nil, err
	}
	tr, err := newTracing(ctx, io.getenv, io.getenv("AWS_LAMBDA_RUNTIME_API") != "", slog.New(slog.NewJSONHandler(io.stderr, &slog.HandlerOptions{ReplaceAttr: readableDurations})))
	if err != nil {
		return aws.Config{}, nil, err
	}
	return cfg, tr, nil
}

// loadAWS reads the SDK's standard configuration chain, which must name a
// region.
func loadAWS(ctx context.Context) (aws.Config, error) { return loadAWSConfig(ctx, false) }

// loadAWSConfig is loadAWS, with the region optional if regionOptional.
func loadAWSConfig(ctx context.Context, regionOptional bool) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(sqsworker.HTTPClient(256)))
	if err != nil {
		return aws.Config{}, usagef("AWS configuration: %v", err)
	}
	if cfg.Region == "" && !regionOptional {
		return aws.Config{}, usagef("AWS_REGION is not set (nor a region in the AWS config file)")
	}
	return cfg, nil
}

func cmdRun(ctx context.Context, args []string, io stdio) error {
	s := newSettings("run", io)
	setWorker := defineWorkerSettings(s)
	brokers := defineBrokerFlags(s)
	metricsAddr := s.String("metrics-addr", "METRICS_ADDR", "", "serve /metrics, /healthz and /readyz here (empty: off)")
	a := defineApp(s)
	s.fs.Usage = func() {
		fmt.Fprint(s.fs.Output(), `Usage: worker run [flags]

Consumes one broker, chosen by which of these is set (exactly one):
  QUEUE_URL      an SQS queue (its redrive policy names the dead-letter queue)
  KAFKA_BROKERS  a Kafka topic, KAFKA_TOPIC, in the consumer group KAFKA_GROUP
                 (dead letters to KAFKA_DEAD_LETTER_TOPIC, default <topic>-dlt)
  AMQP_URL       a RabbitMQ queue, AMQP_QUEUE, declared by worker setup (dead
                 letters to <queue>.dlq); CLAIM_RETENTION is required
Each message is claimed, charged through the provider and completed, with
the same claim store, provider, metrics and /readyz whatever the broker.

`)
		s.fs.PrintDefaults()
	}
	if err := s.Parse(args); err != nil {
		return err
	}
	var cfg sqsworker.Config
	setWorker(&cfg)
	var start starter
	var err error
	a.broker, start, err = brokers.choose(cfg, *a.retention)
	if err != nil {
		return err
	}
	ap, err := a.build(ctx, io)
	if err != nil {
		return err
	}
	defer ap.tracing.shutdown(ap.log)
	defer ap.closePool()
	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSweep()
	go ap.sweep(sweepCtx, *a.pg.sweepInterval)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := worker.NewMetrics(reg)

	p := cfg.Protocol // the shared settings: WORKER_OWNER, OUTAGE_COVER
	p.Store, p.Handler, p.Decoder = ap.store, ap.handler, ap.decoder
	p.Retention, p.Logger, p.Metrics, p.TracerProvider = *a.retention, ap.log, metrics, ap.tracing.TracerProvider()
	p.OriginalIDSecret = ap.originID
	// Reading the queue or the topic can take a while against a cold
	// endpoint; SIGTERM still ends it.
	c, err := start(ctx, ap, p)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, worker.ErrConfig) {
			return nil // stopped while reading the queue
		}
		return startError(err)
	}

	if ap.client != nil {
		registerProviderMetrics(reg, ap.client)
		metrics.KnownDependencies("provider")
	}
	if d, ok := ap.decoder.(*payment.Decoder); ok {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "claimfirst_payment_unknown_fields_total",
			Help: "Payment messages with fields other than payment_id, amount and currency, which were ignored.",
		}, func() float64 { return float64(d.UnknownFields()) }))
	}
	if *metricsAddr != "" {
		srv, err := serveMetrics(*metricsAddr, c.handler(reg), ap.log)
		if err != nil {
			return usagef("METRICS_ADDR (-metrics-addr) %q: %v", *metricsAddr, err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	return c.run(ctx)
}

// serveMetrics serves the transport's operational endpoints (h, from
// worker.HTTPHandler): /metrics, /healthz (the process is up) and /readyz
// (consuming, not stopping, and no dependency breaker open).
func serveMetrics(addr string, h http.Handler, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
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

// checkProviderURL refuses user info and a query in the provider URL
// (where credentials are put; the key belongs in PROVIDER_API_KEY), without
// printing them, and refuses to send an API key in clear over the network:
// an http:// provider URL with a key must name a loopback host (the fake
// provider, a local sidecar) unless allowHTTP says otherwise.
func checkProviderURL(raw string, hasKey, allowHTTP bool) error {
	u, err := url.Parse(raw)
	if err == nil && (u.User != nil || u.RawQuery != "" || u.ForceQuery) {
		return usagef("PROVIDER_URL (-provider-url): must have no user info and no query (the API key goes in PROVIDER_API_KEY)")
	}
	if err != nil || u.Scheme != "http" || !hasKey || allowHTTP {
		return nil // a URL that does not parse is provider.NewClient's to report
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	return usagef("PROVIDER_URL (-provider-url): http:// to %s would send PROVIDER_API_KEY in clear; use https, or set PROVIDER_ALLOW_HTTP=true", host)
}
