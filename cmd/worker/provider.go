package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// providerShutdownTimeout bounds how long in-flight requests may finish after
// a signal; held-back answers are released at once, so it is rarely reached.
const providerShutdownTimeout = 10 * time.Second

// cmdProvider serves the fake payment provider until ctx ends.
func cmdProvider(ctx context.Context, args []string, io stdio) error {
	s := newSettings("provider", io)
	addr := s.String("addr", "PROVIDER_ADDR", "127.0.0.1:8080", "listen address; 127.0.0.1:0 picks a free port")
	failBefore := s.Float("fail-before-charge", "PROVIDER_FAIL_BEFORE_CHARGE", 0, "fraction of keys whose first attempt gets 503 without charging")
	chargeThenTimeout := s.Float("charge-then-timeout", "PROVIDER_CHARGE_THEN_TIMEOUT", 0, "fraction of keys whose first attempt charges, then answers only after -timeout-delay")
	timeoutDelay := s.Duration("timeout-delay", "PROVIDER_TIMEOUT_DELAY", 30*time.Second, "how long a -charge-then-timeout answer is held back")
	latency := s.Duration("latency", "PROVIDER_LATENCY", 0, "time every charge takes")
	ignoreKeys := s.Bool("ignore-keys", "PROVIDER_IGNORE_KEYS", false, "charge on every call, ignoring Idempotency-Key (shows what happens without keys)")
	keyLifetime := s.Duration("key-lifetime", "PROVIDER_FAKE_KEY_LIFETIME", 24*time.Hour, "how long a key is remembered after its first use (charges stay listed); 0 remembers keys forever")
	disableLookup := s.Bool("disable-lookup", "PROVIDER_FAKE_DISABLE_LOOKUP", false, "answer GET /v1/charges?payment_id= with 404, as a provider that cannot look charges up")
	if err := s.Parse(args); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return usagef("PROVIDER_ADDR (-addr) %q is not host:port: %v", *addr, err)
	}
	for _, f := range []struct {
		flag, env string
		v         float64
	}{
		{"fail-before-charge", "PROVIDER_FAIL_BEFORE_CHARGE", *failBefore},
		{"charge-then-timeout", "PROVIDER_CHARGE_THEN_TIMEOUT", *chargeThenTimeout},
	} {
		if !(f.v >= 0 && f.v <= 1) { // also rejects NaN
			return usagef("%s (-%s) must be a fraction between 0 and 1, got %v", f.env, f.flag, f.v)
		}
	}
	if *timeoutDelay <= 0 {
		return usagef("PROVIDER_TIMEOUT_DELAY (-timeout-delay) must be > 0, got %v", *timeoutDelay)
	}
	if *latency < 0 {
		return usagef("PROVIDER_LATENCY (-latency) must be >= 0, got %v", *latency)
	}
	if *keyLifetime < 0 {
		return usagef("PROVIDER_FAKE_KEY_LIFETIME (-key-lifetime) must be >= 0, got %v", *keyLifetime)
	}

	fake := fakeprovider.New(fakeprovider.Config{
		FailBeforeCharge:  *failBefore,
		ChargeThenTimeout: *chargeThenTimeout,
		TimeoutDelay:      *timeoutDelay,
		Latency:           *latency,
		IgnoreKeys:        *ignoreKeys,
		KeyLifetime:       *keyLifetime,
		DisableLookup:     *disableLookup,
	})
	defer fake.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	srv := &http.Server{
		Handler:           fake,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(io.stderr, "provider: ", 0),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(io.stdout, "provider: listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		return fmt.Errorf("provider: %w", err)
	case <-ctx.Done():
	}
	fake.Close() // release held-back answers so that Shutdown need not wait for them
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), providerShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("provider: shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("provider: %w", err)
	}
	st := fake.Stats()
	fmt.Fprintf(io.stderr, "provider: stopped: calls=%d charges=%d replays=%d conflicts=%d mismatches=%d declines=%d faults=%d duplicate_charges=%d\n",
		st.Calls, st.Charges, st.Replays, st.Conflicts, st.Mismatches, st.Declines, st.Faults, len(st.DuplicateCharges()))
	return nil
}
