package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

func TestChargeReplaysRepeatedKey(t *testing.T) {
	t.Parallel()
	fake, srv := startFake(t, fakeprovider.Config{})
	c := newClient(t, fastConfig(srv.URL))
	ctx := t.Context()

	first, err := c.Charge(ctx, "pay_1", pay("pay_1"))
	if err != nil {
		t.Fatalf("first Charge: %v", err)
	}
	if !strings.HasPrefix(first.ID, "ch_") || len(first.ID) != len("ch_")+16 {
		t.Errorf("charge id = %q, want ch_ and 16 hex digits", first.ID)
	}
	if first.Status != provider.StatusSucceeded || first.Replayed || first.Attempts != 1 {
		t.Errorf("first = %+v, want succeeded, not replayed, 1 attempt", first)
	}
	again, err := c.Charge(ctx, "pay_1", pay("pay_1"))
	if err != nil {
		t.Fatalf("second Charge: %v", err)
	}
	if again.ID != first.ID || !again.Replayed {
		t.Errorf("second = %+v, want the replayed %s", again, first.ID)
	}
	wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: 2, Charges: 1, Replays: 1})
}

func TestChargeKeyMismatchIsPermanent(t *testing.T) {
	t.Parallel()
	fake, srv := startFake(t, fakeprovider.Config{})
	c := newClient(t, fastConfig(srv.URL))

	if _, err := c.Charge(t.Context(), "key_1", pay("pay_1")); err != nil {
		t.Fatalf("first Charge: %v", err)
	}
	other := pay("pay_1")
	other.Amount++
	_, err := c.Charge(t.Context(), "key_1", other)
	pe := asError(t, err)
	if pe.Kind != provider.KindKeyMismatch || pe.StatusCode != http.StatusUnprocessableEntity ||
		pe.Type != provider.TypeKeyMismatch || pe.Attempts != 1 || pe.Retryable() {
		t.Errorf("error = %+v, want a permanent 422 key mismatch after 1 attempt", pe)
	}
	wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: 2, Charges: 1, Mismatches: 1})
}

func TestChargeRefusesWhatCanNeverSucceed(t *testing.T) {
	t.Parallel()
	fake, srv := startFake(t, fakeprovider.Config{})
	c := newClient(t, fastConfig(srv.URL))
	tests := []struct {
		name, key string
		p         provider.Payment
		reason    string
	}{
		{"no key", "", pay("pay_1"), "idempotency key is empty"},
		{"key too long", strings.Repeat("k", provider.MaxKeyBytes+1), pay("pay_1"), "more than 255"},
		{"key with newline", "pay\n1", pay("pay_1"), "control character"},
		{"key with space around", " pay_1", pay("pay_1"), "leading or trailing space"},
		{"no payment id", "k", provider.Payment{Amount: 1, Currency: "EUR"}, "payment_id is empty"},
		{"zero amount", "k", provider.Payment{PaymentID: "p", Currency: "EUR"}, "amount must be > 0"},
		{"lowercase currency", "k", provider.Payment{PaymentID: "p", Amount: 1, Currency: "eur"}, "currency must be three uppercase letters"},
	}
	for _, tt := range tests {
		_, err := c.Charge(t.Context(), tt.key, tt.p)
		pe := asError(t, err)
		if pe.Kind != provider.KindBadRequest || pe.Attempts != 0 || pe.StatusCode != 0 || !strings.Contains(pe.Reason, tt.reason) {
			t.Errorf("%s: error = %+v, want bad request before any attempt, reason containing %q", tt.name, pe, tt.reason)
		}
	}
	if st := fake.Stats(); st.Calls != 0 {
		t.Errorf("the provider saw %d calls, want 0", st.Calls)
	}
}

func TestChargeConcurrentCallersWithOneKeyChargeOnce(t *testing.T) {
	t.Parallel()
	fake, srv := startFake(t, fakeprovider.Config{Latency: 30 * time.Millisecond})
	cfg := fastConfig(srv.URL)
	cfg.MaxAttempts, cfg.MinBackoff, cfg.MaxBackoff = 100, 5*time.Millisecond, 20*time.Millisecond
	c := newClient(t, cfg)

	const n = 20
	ids := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ch, err := c.Charge(t.Context(), "pay_shared", pay("pay_shared"))
			ids[i], errs[i] = ch.ID, err
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("caller %d got charge %s, caller 0 got %s", i, ids[i], ids[0])
		}
	}
	st := fake.Stats()
	t.Logf("%d callers, one key, client with retries: calls=%d charges=%d conflicts=%d replays=%d",
		n, st.Calls, st.Charges, st.Conflicts, st.Replays)
	if st.Charges != 1 || st.ChargesByPayment["pay_shared"] != 1 {
		t.Errorf("charges = %d, want exactly 1", st.Charges)
	}
	if st.Replays != n-1 || st.Calls != n+st.Conflicts {
		t.Errorf("stats = %+v: want every caller but the first to get a replay, after retrying its 409s", st)
	}
}

// bodyRecorder copies every answer body the wrapped handler writes.
type bodyRecorder struct {
	http.ResponseWriter
	bodies chan<- string
}

func (r bodyRecorder) Write(b []byte) (int, error) {
	r.bodies <- string(b)
	return r.ResponseWriter.Write(b)
}

func TestChargeRetriesATimeoutAfterChargeWithTheSameKey(t *testing.T) {
	t.Parallel()
	var keys []string
	var mu sync.Mutex
	fake := fakeprovider.New(fakeprovider.Config{
		TimeoutFirst: func(key string, _ provider.Payment) bool { return key == "pay_slow" },
		TimeoutDelay: time.Hour, // until the client gives up on the request
	})
	t.Cleanup(fake.Close)
	bodies := make(chan string, 10)
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		fake.ServeHTTP(bodyRecorder{w, bodies}, r)
	}))
	cfg := fastConfig(srv.URL)
	cfg.Timeout = 200 * time.Millisecond
	c := newClient(t, cfg)

	ch, err := c.Charge(t.Context(), "pay_slow", pay("pay_slow"))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if !ch.Replayed || ch.Attempts != 2 {
		t.Errorf("charge = %+v, want the result replayed on the second attempt", ch)
	}
	// Both answers, the one the client gave up on and the replay, carry the
	// one charge that was made.
	for range 2 {
		select {
		case b := <-bodies:
			var got provider.Charge
			if err := json.Unmarshal([]byte(b), &got); err != nil || got.ID != ch.ID {
				t.Errorf("an answer was %s, want charge %s", b, ch.ID)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the held-back answer was never written")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] != "pay_slow" || keys[1] != "pay_slow" {
		t.Errorf("Idempotency-Key headers = %q, want pay_slow twice", keys)
	}
	wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: 2, Charges: 1, Replays: 1, Faults: 1})
}

func TestChargeRetriesAFailureBeforeCharge(t *testing.T) {
	t.Parallel()
	fake, srv := startFake(t, fakeprovider.Config{FailFirst: func(string, provider.Payment) bool { return true }})
	c := newClient(t, fastConfig(srv.URL))
	ch, err := c.Charge(t.Context(), "pay_1", pay("pay_1"))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if ch.Replayed || ch.Attempts != 2 {
		t.Errorf("charge = %+v, want a new charge on the second attempt", ch)
	}
	wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: 2, Charges: 1, Faults: 1})
}

func TestChargeDeclineIsNotRetried(t *testing.T) {
	t.Parallel()
	fake, srv := startFake(t, fakeprovider.Config{})
	c := newClient(t, fastConfig(srv.URL))

	_, err := c.Charge(t.Context(), "pay_d", pay("decline_insufficient_funds"))
	pe := asError(t, err)
	if pe.Kind != provider.KindDeclined || pe.StatusCode != http.StatusPaymentRequired ||
		pe.Type != provider.TypeCardDeclined || pe.Attempts != 1 || pe.Retryable() {
		t.Errorf("error = %+v, want a definitive 402 decline after 1 attempt", pe)
	}
	const want = "provider: charge declined: HTTP 402 card_declined: the card was declined (1 attempt)"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: 1, Declines: 1})

	// The decline is the key's result: asking again replays it.
	_, err = c.Charge(t.Context(), "pay_d", pay("decline_insufficient_funds"))
	if pe := asError(t, err); pe.Kind != provider.KindDeclined {
		t.Errorf("repeated decline: %v, want declined", err)
	}
	wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: 2, Declines: 1, Replays: 1})
}

func TestChargeRetries5xxThenGivesUp(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte(`{"error":{"type":"upstream","message":"acquirer unreachable"}}`))
	}))
	cfg := fastConfig(srv.URL)
	cfg.MaxAttempts = 3
	c := newClient(t, cfg)

	_, err := c.Charge(t.Context(), "pay_1", pay("pay_1"))
	pe := asError(t, err)
	if pe.Kind != provider.KindUnknown || !pe.Retryable() || pe.StatusCode != http.StatusBadGateway ||
		pe.Reason != "acquirer unreachable" || pe.Attempts != 3 {
		t.Errorf("error = %+v, want outcome unknown, 502, after 3 attempts", pe)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("calls = %d, want 3", n)
	}
}

func TestChargeStatusKinds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status   int
		kind     provider.Kind
		attempts int
	}{
		{http.StatusBadRequest, provider.KindBadRequest, 1},
		// The provider refusing us (credentials, URL) is not the payment's fault.
		{http.StatusUnauthorized, provider.KindDependency, 1},
		{http.StatusForbidden, provider.KindDependency, 1},
		{http.StatusNotFound, provider.KindDependency, 1},
		{http.StatusMethodNotAllowed, provider.KindDependency, 1},
		{http.StatusTeapot, provider.KindDependency, 1},
		{http.StatusFound, provider.KindDependency, 1}, // a redirected charge is a misconfiguration
		{http.StatusPaymentRequired, provider.KindDeclined, 1},
		{http.StatusUnprocessableEntity, provider.KindKeyMismatch, 1},
		{http.StatusRequestTimeout, provider.KindUnknown, 2},
		{http.StatusConflict, provider.KindUnknown, 2},
		{http.StatusTooManyRequests, provider.KindUnknown, 2},
		{http.StatusInternalServerError, provider.KindUnknown, 2},
		{http.StatusServiceUnavailable, provider.KindUnknown, 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				calls.Add(1)
				if tt.status == http.StatusFound {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
			}))
			cfg := fastConfig(srv.URL)
			cfg.MaxAttempts = 2
			_, err := newClient(t, cfg).Charge(t.Context(), "k", pay("p"))
			pe := asError(t, err)
			if pe.Kind != tt.kind || pe.StatusCode != tt.status || pe.Attempts != tt.attempts || calls.Load() != int64(tt.attempts) {
				t.Errorf("error = %+v after %d calls, want kind %v after %d", pe, calls.Load(), tt.kind, tt.attempts)
			}
			if pe.Reason != http.StatusText(tt.status) {
				t.Errorf("reason = %q, want the status text when the body has none", pe.Reason)
			}
		})
	}
}

func TestChargeHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		retryAfter  string
		maxBackoff  time.Duration
		least, most time.Duration
	}{
		{"seconds", "1", 5 * time.Second, time.Second, 4 * time.Second},
		{"capped by MaxBackoff", "3600", 100 * time.Millisecond, 100 * time.Millisecond, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake, _ := startFake(t, fakeprovider.Config{})
			var mu sync.Mutex
			var times []time.Time
			srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				times = append(times, time.Now())
				first := len(times) == 1
				mu.Unlock()
				if first {
					w.Header().Set("Retry-After", tt.retryAfter)
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				fake.ServeHTTP(w, r)
			}))
			cfg := fastConfig(srv.URL)
			cfg.MaxBackoff = tt.maxBackoff
			if _, err := newClient(t, cfg).Charge(t.Context(), "k", pay("p")); err != nil {
				t.Fatalf("Charge: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(times) != 2 {
				t.Fatalf("calls = %d, want 2", len(times))
			}
			if gap := times[1].Sub(times[0]); gap < tt.least || gap > tt.most {
				t.Errorf("second attempt %v after the first, want between %v and %v", gap, tt.least, tt.most)
			}
		})
	}
}

func TestChargeStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	// unavailable answers 503 and asks for a retry an hour later.
	unavailable := func(calls *atomic.Int64, onCall func()) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			calls.Add(1)
			if onCall != nil {
				onCall()
			}
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
		})
	}
	slow := func(baseURL string) provider.Config {
		cfg := fastConfig(baseURL)
		cfg.MaxAttempts, cfg.MinBackoff, cfg.MaxBackoff = 10, time.Hour, time.Hour
		return cfg
	}

	t.Run("cancelled during the first attempt", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		var calls atomic.Int64
		srv := serve(t, unavailable(&calls, cancel))
		_, err := newClient(t, slow(srv.URL)).Charge(ctx, "k", pay("p"))
		pe := asError(t, err)
		if !errors.Is(err, context.Canceled) || pe.Kind != provider.KindUnknown || pe.Attempts != 1 || calls.Load() != 1 {
			t.Errorf("error = %v after %d calls, want outcome unknown, context canceled, 1 attempt", err, calls.Load())
		}
	})

	t.Run("deadline before the next attempt", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var calls atomic.Int64
		srv := serve(t, unavailable(&calls, nil))
		begin := time.Now()
		_, err := newClient(t, slow(srv.URL)).Charge(ctx, "k", pay("p"))
		if !errors.Is(err, context.DeadlineExceeded) || calls.Load() != 1 {
			t.Errorf("error = %v after %d calls, want deadline exceeded after 1", err, calls.Load())
		}
		if d := time.Since(begin); d > 30*time.Second {
			t.Errorf("Charge waited %v for an attempt it could not make", d)
		}
	})

	t.Run("cancelled during a request", func(t *testing.T) {
		t.Parallel()
		fake := fakeprovider.New(fakeprovider.Config{
			TimeoutFirst: func(string, provider.Payment) bool { return true },
			TimeoutDelay: time.Hour,
		})
		t.Cleanup(fake.Close)
		ctx, cancel := context.WithCancel(t.Context())
		srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cancel() // the caller gives up while the provider holds the answer
			fake.ServeHTTP(w, r)
		}))
		_, err := newClient(t, slow(srv.URL)).Charge(ctx, "k", pay("p"))
		pe := asError(t, err)
		if !errors.Is(err, context.Canceled) || pe.Kind != provider.KindUnknown || pe.Attempts != 1 {
			t.Errorf("error = %v, want outcome unknown, context canceled, 1 attempt", err)
		}
	})

	t.Run("already done", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		srv := serve(t, unavailable(&calls, nil))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := newClient(t, slow(srv.URL)).Charge(ctx, "k", pay("p"))
		if pe := asError(t, err); pe.Attempts != 0 || !errors.Is(err, context.Canceled) || calls.Load() != 0 {
			t.Errorf("error = %+v after %d calls, want no attempt", pe, calls.Load())
		}
	})
}

func TestIgnoreKeysChargesEveryCall(t *testing.T) {
	t.Parallel()
	fake, srv := startFake(t, fakeprovider.Config{IgnoreKeys: true})
	c := newClient(t, fastConfig(srv.URL))
	a, err := c.Charge(t.Context(), "pay_1", pay("pay_1"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Charge(t.Context(), "pay_1", pay("pay_1"))
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == b.ID || a.Replayed || b.Replayed {
		t.Errorf("charges %+v and %+v, want two distinct new charges", a, b)
	}
	st := fake.Stats()
	wantStats(t, st, fakeprovider.Stats{Calls: 2, Charges: 2})
	if dup := st.DuplicateCharges(); len(dup) != 1 || dup[0] != "pay_1" {
		t.Errorf("DuplicateCharges() = %q, want [pay_1]", dup)
	}
}

func TestAPIKeyIsSentAndNeverShown(t *testing.T) {
	t.Parallel()
	const secret = "sk_test_4eC39HqLyjWDarjtT1zdp7dc"
	var auth atomic.Value
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	cfg := fastConfig(srv.URL)
	cfg.APIKey = secret
	cfg.MaxAttempts = 2
	_, err := newClient(t, cfg).Charge(t.Context(), "k", pay("p"))
	if err == nil {
		t.Fatal("Charge succeeded against a failing provider")
	}
	if got := auth.Load(); got != "Bearer "+secret {
		t.Errorf("Authorization = %q, want the bearer key", got)
	}

	// A transport error, too.
	dead := serve(t, http.NotFoundHandler())
	dead.Close()
	cfg.BaseURL = dead.URL
	_, deadErr := newClient(t, cfg).Charge(t.Context(), "k", pay("p"))
	if pe := asError(t, deadErr); pe.StatusCode != 0 || pe.Kind != provider.KindUnknown {
		t.Errorf("error = %+v, want a transport error", pe)
	}

	cfg.BaseURL = "http://user:hunter2@127.0.0.1:1"
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", slog.Any("provider", cfg))
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "provider", cfg)
	_, invalid := provider.NewClient(provider.Config{BaseURL: cfg.BaseURL, Timeout: -1, APIKey: secret})
	shown := map[string]string{
		"err":     err.Error(),
		"%+v err": fmt.Sprintf("%+v", err),
		"dead":    deadErr.Error(),
		"slog":    logged.String(),
		"invalid": invalid.Error(),
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%d", "%x"} {
		shown[verb] = fmt.Sprintf(verb, cfg)
		shown[verb+" of a pointer"] = fmt.Sprintf(verb, &cfg)
	}
	for name, s := range shown {
		if strings.Contains(s, secret) || strings.Contains(s, "hunter2") {
			t.Errorf("%s shows a secret: %s", name, s)
		}
	}
	if !strings.Contains(shown["%+v"], "[redacted]") || !strings.Contains(shown["slog"], "[redacted]") {
		t.Errorf("a set APIKey should show as [redacted]: %s / %s", shown["%+v"], shown["slog"])
	}
}

func TestNewClientValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  provider.Config
		want []string // each must appear in the error; none means valid
	}{
		{"defaults", provider.Config{BaseURL: "http://127.0.0.1:8080"}, nil},
		{"https with path", provider.Config{BaseURL: "https://pay.example.com/api/"}, nil},
		{"no base URL", provider.Config{}, []string{"BaseURL is required"}},
		{"not http", provider.Config{BaseURL: "ftp://example.com"}, []string{"BaseURL", "scheme"}},
		{"no host", provider.Config{BaseURL: "http://"}, []string{"BaseURL", "host"}},
		{"query", provider.Config{BaseURL: "http://h/?a=b"}, []string{"BaseURL", "query"}},
		{"negative timeout", provider.Config{BaseURL: "http://h", Timeout: -time.Second}, []string{"Timeout"}},
		{"negative attempts", provider.Config{BaseURL: "http://h", MaxAttempts: -1}, []string{"MaxAttempts"}},
		{"backoff upside down", provider.Config{BaseURL: "http://h", MinBackoff: 2 * time.Second, MaxBackoff: time.Second}, []string{"MinBackoff (2s) must not exceed MaxBackoff (1s)"}},
		{"key with newline", provider.Config{BaseURL: "http://h", APIKey: "sk\nx"}, []string{"APIKey"}},
		{"everything at once", provider.Config{Timeout: -1, MaxAttempts: -1, MinBackoff: -1}, []string{"BaseURL", "Timeout", "MaxAttempts", "MinBackoff"}},
	}
	for _, tt := range tests {
		c, err := provider.NewClient(tt.cfg)
		if len(tt.want) == 0 {
			if err != nil || c == nil {
				t.Errorf("%s: NewClient: %v, want a client", tt.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: NewClient succeeded, want an error mentioning %q", tt.name, tt.want)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tt.name, err, w)
			}
		}
		if strings.Contains(err.Error(), "sk\nx") {
			t.Errorf("%s: error shows the API key", tt.name)
		}
	}
}

// A provider URL is shown as its scheme and host only: a username, a query
// (where API keys are put) or a path never reaches an error or a log, and a
// URL with user info or a query is refused.
func TestProviderURLShowsSchemeAndHostOnly(t *testing.T) {
	t.Parallel()
	dead := serve(t, http.NotFoundHandler())
	dead.Close()
	host := strings.TrimPrefix(dead.URL, "http://")
	refused := []struct{ name, url, want string }{
		{"query", "http://" + host + "/?api_key=qsecret", "query"},
		{"username only", "http://usersecret:@" + host, "user info"},
		{"username and password", "http://usersecret:pwsecret@" + host, "user info"},
		{"bad scheme with user", "ftp://usersecret:@" + host + "?api_key=qsecret", "scheme"},
		{"no host with query", "http:///?api_key=qsecret", "host"},
	}
	for _, tt := range refused {
		cfg := fastConfig(tt.url)
		var logged bytes.Buffer
		slog.New(slog.NewTextHandler(&logged, nil)).Info("config", slog.Any("provider", cfg))
		shown := map[string]string{"String": cfg.String(), "slog": logged.String()}
		c, err := provider.NewClient(cfg)
		if err == nil {
			c.CloseIdleConnections()
			t.Errorf("%s: NewClient(%q) accepted it, want it refused for %s", tt.name, tt.url, tt.want)
		} else {
			shown["NewClient"] = err.Error()
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "BaseURL") {
				t.Errorf("%s: error %q does not name BaseURL and %q", tt.name, err, tt.want)
			}
		}
		for what, s := range shown {
			for _, secret := range []string{"usersecret", "pwsecret", "qsecret"} {
				if strings.Contains(s, secret) {
					t.Errorf("%s: %s shows %q: %s", tt.name, what, secret, s)
				}
			}
		}
	}

	// A transport error, and the warning when attempts run out, name the
	// scheme and host, not the path.
	var logged bytes.Buffer
	cfg := fastConfig(dead.URL + "/pathsecret/")
	cfg.MaxAttempts = 1
	cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	_, err := newClient(t, cfg).Charge(t.Context(), "k", pay("p"))
	if err == nil {
		t.Fatal("Charge succeeded against a closed server")
	}
	for what, s := range map[string]string{"error": err.Error(), "log": logged.String()} {
		if strings.Contains(s, "pathsecret") {
			t.Errorf("transport %s shows the path: %s", what, s)
		}
		if !strings.Contains(s, dead.URL) {
			t.Errorf("transport %s does not name %s: %s", what, dead.URL, s)
		}
	}
}
