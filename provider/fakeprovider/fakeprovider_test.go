package fakeprovider_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const payBody = `{"payment_id":"pay_1","amount":1999,"currency":"EUR"}`

// start serves a fake provider over real HTTP until the test ends.
func start(t *testing.T, cfg fakeprovider.Config) (*fakeprovider.Server, *httptest.Server) {
	t.Helper()
	return fakeprovider.StartTest(t, cfg)
}

type answer struct {
	status   int
	replayed bool
	charge   provider.Charge
	err      provider.ErrorDetail
}

// post sends a charge request over HTTP; key "" sends no Idempotency-Key.
func post(t *testing.T, srv *httptest.Server, key, body string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return read(t, resp.StatusCode, resp.Header, resp.Body)
}

// serve sends a charge request to the handler in process.
func serve(t *testing.T, h http.Handler, key, body string) answer {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/charges", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return read(t, rec.Code, rec.Header(), rec.Body)
}

func read(t *testing.T, status int, h http.Header, body io.Reader) answer {
	t.Helper()
	a := answer{status: status, replayed: h.Get("Idempotent-Replayed") == "true"}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	data, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	if status == http.StatusOK {
		err = json.Unmarshal(data, &a.charge)
	} else {
		var er provider.ErrorResponse
		err = json.Unmarshal(data, &er)
		a.err = er.Error
	}
	if err != nil {
		t.Fatalf("%d answer %q: %v", status, data, err)
	}
	return a
}

func wantStats(t *testing.T, got, want fakeprovider.Stats) {
	t.Helper()
	got.ChargesByPayment, want.ChargesByPayment = nil, nil
	got.ChargeLog, want.ChargeLog = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats = %+v, want %+v", got, want)
	}
}

func payment(id string, amount int64) string {
	return fmt.Sprintf(`{"payment_id":%q,"amount":%d,"currency":"EUR"}`, id, amount)
}

func TestReplayAndMismatch(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, fakeprovider.Config{})
	first := post(t, srv, "k1", payBody)
	if first.status != http.StatusOK || first.replayed || first.charge.Status != provider.StatusSucceeded || len(first.charge.ID) != 19 {
		t.Fatalf("first = %+v, want a new charge ch_ + 16 hex digits", first)
	}
	again := post(t, srv, "k1", payBody)
	if again.status != http.StatusOK || !again.replayed || again.charge != first.charge {
		t.Errorf("again = %+v, want %+v replayed", again, first.charge)
	}
	// The same payment, spelled differently, is the same payload.
	reordered := post(t, srv, "k1", `{"currency":"EUR","amount":1999,"payment_id":"pay_1"}`)
	if !reordered.replayed || reordered.charge != first.charge {
		t.Errorf("reordered = %+v, want a replay", reordered)
	}
	other := post(t, srv, "k1", payment("pay_1", 2000))
	if other.status != http.StatusUnprocessableEntity || other.err.Type != provider.TypeKeyMismatch {
		t.Errorf("other payload = %+v, want 422 %s", other, provider.TypeKeyMismatch)
	}
	wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: 4, Charges: 1, Replays: 2, Mismatches: 1})
}

func TestInvalidRequestsAre400(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, fakeprovider.Config{})
	tests := []struct {
		name, key, body string
		status          int
		message         string
	}{
		{"no key", "", payBody, 400, "Idempotency-Key header is required"},
		{"key too long", strings.Repeat("k", 256), payBody, 400, "Idempotency-Key"},
		{"bad JSON", "k", `{"payment_id":`, 400, "payment"},
		{"empty payment_id", "k", `{"payment_id":"","amount":1,"currency":"EUR"}`, 400, "payment_id is empty"},
		{"zero amount", "k", payment("p", 0), 400, "amount must be > 0"},
		{"fractional amount", "k", `{"payment_id":"p","amount":1.5,"currency":"EUR"}`, 400, "amount must be a JSON integer"},
		{"lowercase currency", "k", `{"payment_id":"p","amount":1,"currency":"eur"}`, 400, "currency must be three uppercase letters"},
		{"too large", "k", `{"payment_id":"` + strings.Repeat("x", 70_000) + `"}`, 413, "larger than 64 KiB"},
	}
	for _, tt := range tests {
		a := post(t, srv, tt.key, tt.body)
		if a.status != tt.status || a.err.Type != provider.TypeInvalidRequest || !strings.Contains(a.err.Message, tt.message) {
			t.Errorf("%s: %+v, want %d %s mentioning %q", tt.name, a, tt.status, provider.TypeInvalidRequest, tt.message)
		}
	}
	// A rejected request stores nothing: the key is still new.
	if a := post(t, srv, "k", payBody); a.status != http.StatusOK || a.replayed {
		t.Errorf("first valid request with the key = %+v, want a new charge", a)
	}
	wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: int64(len(tests)) + 1, Charges: 1})
}

func TestConcurrentRequestsWithOneKeyChargeOnce(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, fakeprovider.Config{Latency: 50 * time.Millisecond})
	const n = 20
	answers := make([]answer, n)
	begin := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-begin
			answers[i] = post(t, srv, "pay_shared", payment("pay_shared", 500))
		})
	}
	close(begin)
	wg.Wait()

	var fresh, replays, conflicts int64
	var id string
	for _, a := range answers {
		switch {
		case a.status == http.StatusOK && !a.replayed:
			fresh++
			id = a.charge.ID
		case a.status == http.StatusOK:
			replays++
		case a.status == http.StatusConflict && a.err.Type == provider.TypeKeyInUse:
			conflicts++
		default:
			t.Errorf("unexpected answer %+v", a)
		}
	}
	for _, a := range answers {
		if a.status == http.StatusOK && a.charge.ID != id {
			t.Errorf("answers carry charges %s and %s", a.charge.ID, id)
		}
	}
	st := fake.Stats()
	t.Logf("%d concurrent requests, one new key: calls=%d charges=%d conflicts=%d replays=%d", n, st.Calls, st.Charges, st.Conflicts, st.Replays)
	if fresh != 1 {
		t.Errorf("%d requests got a new charge, want exactly 1", fresh)
	}
	wantStats(t, st, fakeprovider.Stats{Calls: n, Charges: 1, Conflicts: conflicts, Replays: replays})
	if got := st.ChargesByPayment["pay_shared"]; got != 1 {
		t.Errorf("charges of pay_shared = %d, want 1", got)
	}
}

func TestKeyInProgressGets409(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := fakeprovider.New(fakeprovider.Config{Latency: time.Hour})
		defer fake.Close()
		var first answer
		done := make(chan struct{})
		go func() {
			defer close(done)
			first = serve(t, fake, "k", payBody)
		}()
		synctest.Wait() // the first request is charging, for an hour

		if a := serve(t, fake, "k", payBody); a.status != http.StatusConflict || a.err.Type != provider.TypeKeyInUse {
			t.Errorf("same key while in progress = %+v, want 409", a)
		}
		// A different payload conflicts too: nothing is stored to compare with yet.
		if a := serve(t, fake, "k", payment("pay_1", 1)); a.status != http.StatusConflict {
			t.Errorf("other payload while in progress = %+v, want 409", a)
		}
		time.Sleep(time.Hour)
		<-done
		if first.status != http.StatusOK || first.replayed {
			t.Errorf("first = %+v, want a new charge", first)
		}
		if a := serve(t, fake, "k", payBody); !a.replayed || a.charge != first.charge {
			t.Errorf("after charging = %+v, want the replay of %+v", a, first.charge)
		}
		wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: 4, Charges: 1, Conflicts: 2, Replays: 1})
	})
}

func TestChargeThenTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := fakeprovider.New(fakeprovider.Config{
			ChargeThenTimeout: 1, // every key's first attempt
			TimeoutDelay:      30 * time.Second,
		})
		defer fake.Close()
		begin := time.Now()
		var held answer
		var heldFor time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			held = serve(t, fake, "k", payBody)
			heldFor = time.Since(begin)
		}()
		synctest.Wait()
		// The caller gave up and retries: the charge is already the key's result.
		retry := serve(t, fake, "k", payBody)
		if retry.status != http.StatusOK || !retry.replayed {
			t.Errorf("retry = %+v, want a replayed charge", retry)
		}
		<-done
		if heldFor != 30*time.Second || held.charge != retry.charge || held.replayed {
			t.Errorf("held answer %+v after %v, want the original charge %+v after 30s", held, heldFor, retry.charge)
		}
		wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: 2, Charges: 1, Replays: 1, Faults: 1})
	})
}

func TestCloseReleasesHeldRequests(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := fakeprovider.New(fakeprovider.Config{
			TimeoutFirst: func(key string, _ provider.Payment) bool { return key == "held" },
			TimeoutDelay: time.Hour,
			Latency:      time.Hour,
		})
		begin := time.Now()
		var wg sync.WaitGroup
		for _, key := range []string{"held", "slow"} {
			wg.Go(func() {
				if a := serve(t, fake, key, payment(key, 1)); a.status != http.StatusOK {
					t.Errorf("%s: %+v, want a charge", key, a)
				}
			})
		}
		synctest.Wait()
		fake.Close()
		wg.Wait()
		if d := time.Since(begin); d != 0 {
			t.Errorf("held requests returned after %v, want at once on Close", d)
		}
		fake.Close() // idempotent
		if a := serve(t, fake, "after", payment("after", 1)); a.status != http.StatusOK {
			t.Errorf("after Close: %+v, want the server still serving", a)
		}
	})
}

func TestFailBeforeCharge(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, fakeprovider.Config{FailFirst: func(key string, _ provider.Payment) bool { return key == "bad" }})
	if a := post(t, srv, "bad", payBody); a.status != http.StatusServiceUnavailable || a.err.Type != provider.TypeUnavailable {
		t.Errorf("first attempt = %+v, want 503", a)
	}
	wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: 1, Faults: 1})
	second := post(t, srv, "bad", payBody)
	if second.status != http.StatusOK || second.replayed {
		t.Errorf("second attempt = %+v, want a new charge", second)
	}
	if a := post(t, srv, "bad", payBody); !a.replayed || a.charge != second.charge {
		t.Errorf("third attempt = %+v, want the replay of %+v", a, second.charge)
	}
	if a := post(t, srv, "good", payBody); a.status != http.StatusOK || a.replayed {
		t.Errorf("another key = %+v, want a new charge", a)
	}
	st := fake.Stats()
	wantStats(t, st, fakeprovider.Stats{Calls: 4, Charges: 2, Replays: 1, Faults: 1})
	// Two keys for one payment: the provider cannot know they are one.
	if dup := st.DuplicateCharges(); !reflect.DeepEqual(dup, []string{"pay_1"}) {
		t.Errorf("DuplicateCharges() = %q, want [pay_1]", dup)
	}
}

func TestDeclineIsTheKeysResult(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, fakeprovider.Config{})
	body := payment("decline_card", 100)
	first := post(t, srv, "k", body)
	if first.status != http.StatusPaymentRequired || first.replayed || first.err.Type != provider.TypeCardDeclined {
		t.Errorf("first = %+v, want 402 %s", first, provider.TypeCardDeclined)
	}
	if again := post(t, srv, "k", body); again.status != http.StatusPaymentRequired || !again.replayed || again.err != first.err {
		t.Errorf("again = %+v, want the decline replayed", again)
	}
	wantStats(t, fake.Stats(), fakeprovider.Stats{Calls: 2, Declines: 1, Replays: 1})
}

func TestIgnoreKeys(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, fakeprovider.Config{IgnoreKeys: true})
	a := post(t, srv, "k", payBody)
	b := post(t, srv, "k", payBody)
	c := post(t, srv, "", payBody)
	for _, x := range []answer{a, b, c} {
		if x.status != http.StatusOK || x.replayed {
			t.Errorf("answer %+v, want a new charge", x)
		}
	}
	if a.charge.ID == b.charge.ID || b.charge.ID == c.charge.ID {
		t.Errorf("charges %s, %s, %s: want three", a.charge.ID, b.charge.ID, c.charge.ID)
	}
	st := fake.Stats()
	wantStats(t, st, fakeprovider.Stats{Calls: 3, Charges: 3})
	if st.ChargesByPayment["pay_1"] != 3 || !reflect.DeepEqual(st.DuplicateCharges(), []string{"pay_1"}) {
		t.Errorf("stats = %+v, want pay_1 charged 3 times", st)
	}
}

func TestFaultChoiceIsDeterministic(t *testing.T) {
	t.Parallel()
	cfg := fakeprovider.Config{FailBeforeCharge: 0.02, ChargeThenTimeout: 0.02}
	run := func() (failed []string, st fakeprovider.Stats) {
		fake := fakeprovider.New(cfg)
		fake.Close() // held answers return at once
		for i := range 2000 {
			key := fmt.Sprintf("pay_%04d", i)
			if a := serve(t, fake, key, payment(key, 100)); a.status == http.StatusServiceUnavailable {
				failed = append(failed, key)
			}
		}
		return failed, fake.Stats()
	}
	failed1, st1 := run()
	failed2, st2 := run()
	if !reflect.DeepEqual(failed1, failed2) {
		t.Errorf("two runs failed different keys: %q and %q", failed1, failed2)
	}
	timedOut := st1.Faults - int64(len(failed1))
	t.Logf("2000 keys at 2%%: %d failed before charging, %d timed out after charging", len(failed1), timedOut)
	if len(failed1) < 20 || len(failed1) > 65 || timedOut < 20 || timedOut > 65 {
		t.Errorf("%d failed and %d timed out of 2000, want about 40 each", len(failed1), timedOut)
	}
	if st1.Faults != st2.Faults || st1.Charges != 2000-int64(len(failed1)) {
		t.Errorf("stats %+v and %+v", st1, st2)
	}

	// A predicate picks exactly the keys it wants.
	fake := fakeprovider.New(fakeprovider.Config{
		FailBeforeCharge: 0.5, // overridden
		FailFirst:        func(key string, _ provider.Payment) bool { return strings.HasSuffix(key, "0") },
	})
	for i := range 100 {
		key := fmt.Sprintf("k%d", i)
		serve(t, fake, key, payment(key, 1))
	}
	if st := fake.Stats(); st.Faults != 10 || st.Charges != 90 {
		t.Errorf("stats %+v, want exactly the 10 chosen keys failed", st)
	}
}

func TestStatsEndpointAndRoutes(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, fakeprovider.Config{})
	post(t, srv, "a", payment("pay_a", 1))
	post(t, srv, "a", payment("pay_a", 1))
	post(t, srv, "b", payment("decline_b", 1))

	resp, err := srv.Client().Get(srv.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"calls": 3.0, "charges": 1.0, "replays": 1.0, "conflicts": 0.0, "mismatches": 0.0,
		"declines": 1.0, "faults": 0.0, "charges_by_payment": map[string]any{"pay_a": 1.0}, "charge_log": []any{"pay_a"},
	}
	if !reflect.DeepEqual(raw, want) {
		t.Errorf("GET /stats = %v, want %v", raw, want)
	}
	if st := fake.Stats(); st.Calls != 3 {
		t.Errorf("Stats().Calls = %d after GET /stats, want 3 (stats are not calls)", st.Calls)
	}

	for _, tt := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/v1/charges", http.StatusBadRequest}, // a lookup needs payment_id
		{http.MethodDelete, "/v1/charges", http.StatusMethodNotAllowed},
		{http.MethodPost, "/stats", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/other", http.StatusNotFound},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tt.method, srv.URL+tt.path, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
		}
	}
}

func TestDuplicateCharges(t *testing.T) {
	t.Parallel()
	st := fakeprovider.Stats{ChargesByPayment: map[string]int64{"c": 1, "b": 2, "a": 3}}
	if got := st.DuplicateCharges(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("DuplicateCharges() = %q, want [a b]", got)
	}
	if got := (fakeprovider.Stats{}).DuplicateCharges(); len(got) != 0 {
		t.Errorf("DuplicateCharges() of nothing = %q", got)
	}
}

// lookup lists a payment's charges over HTTP.
func lookup(t *testing.T, srv *httptest.Server, paymentID string) (int, provider.ChargeList) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/v1/charges?payment_id=" + url.QueryEscape(paymentID))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list provider.ChargeList
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, list
}

func TestLookupListsAPaymentsCharges(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, fakeprovider.Config{})
	before := time.Now().UTC().Add(-time.Second)
	a := post(t, srv, "k1", payment("pay_l", 700))
	b := post(t, srv, "k2", payment("pay_l", 700)) // another key: the provider cannot know it is the same payment
	post(t, srv, "k1", payment("pay_l", 700))      // a replay charges nothing
	post(t, srv, "k3", payment("decline_l", 1))    // a decline is no charge

	status, list := lookup(t, srv, "pay_l")
	if status != http.StatusOK || len(list.Data) != 2 {
		t.Fatalf("lookup = %d %+v, want the two charges", status, list)
	}
	for i, want := range []string{a.charge.ID, b.charge.ID} {
		c := list.Data[i]
		if c.ID != want || c.PaymentID != "pay_l" || c.Amount != 700 || c.Currency != "EUR" || c.Status != provider.StatusSucceeded ||
			c.Created.Before(before) || c.Created.After(time.Now().Add(time.Second)) {
			t.Errorf("charge %d = %+v, want %s of pay_l, 700 EUR, succeeded, created now", i, c, want)
		}
	}
	// None is an empty list, not null.
	resp, err := srv.Client().Get(srv.URL + "/v1/charges?payment_id=decline_l")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(raw)) != `{"data":[]}` {
		t.Errorf("lookup of an uncharged payment = %d %s, want 200 {\"data\":[]}", resp.StatusCode, raw)
	}
	if st := fake.Stats(); st.Lookups != 2 || st.Calls != 4 {
		t.Errorf("stats = %+v, want 2 lookups, and lookups are not charge calls", st)
	}
}

func TestLookupCanBeSwitchedOff(t *testing.T) {
	t.Parallel()
	_, srv := start(t, fakeprovider.Config{DisableLookup: true})
	post(t, srv, "k1", payBody)
	if status, _ := lookup(t, srv, "pay_1"); status != http.StatusNotFound {
		t.Errorf("lookup switched off = %d, want 404", status)
	}
}

// clock is a settable clock for KeyLifetime.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestKeyLifetimeForgetsKeysButNotCharges(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now()}
	fake, srv := start(t, fakeprovider.Config{KeyLifetime: 24 * time.Hour, Now: clk.now})
	first := post(t, srv, "k", payBody)
	clk.advance(24*time.Hour - time.Millisecond)
	if a := post(t, srv, "k", payBody); !a.replayed || a.charge != first.charge {
		t.Fatalf("just inside the lifetime = %+v, want the replay of %+v", a, first.charge)
	}
	clk.advance(time.Millisecond)
	late := post(t, srv, "k", payBody)
	if late.status != http.StatusOK || late.replayed || late.charge.ID == first.charge.ID {
		t.Fatalf("at the lifetime = %+v, want the key forgotten: a new charge", late)
	}
	// The forgotten key's new life replays its own result, and another
	// payload with it is a new mismatch, not compared with the forgotten one.
	if a := post(t, srv, "k", payBody); !a.replayed || a.charge != late.charge {
		t.Errorf("after the new charge = %+v, want its replay", a)
	}
	if a := post(t, srv, "k", payment("pay_1", 1)); a.status != http.StatusUnprocessableEntity {
		t.Errorf("another payload = %+v, want 422", a)
	}
	st := fake.Stats()
	if st.Charges != 2 || !reflect.DeepEqual(st.DuplicateCharges(), []string{"pay_1"}) {
		t.Errorf("stats = %+v, want pay_1 charged twice", st)
	}
	if _, list := lookup(t, srv, "pay_1"); len(list.Data) != 2 || list.Data[0].ID != first.charge.ID || list.Data[1].ID != late.charge.ID {
		t.Errorf("lookup = %+v, want both charges listed, the forgotten key's first", list)
	}
}

func TestKeysAreRememberedWithoutALifetime(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now()}
	_, srv := start(t, fakeprovider.Config{Now: clk.now})
	first := post(t, srv, "k", payBody)
	clk.advance(1000 * time.Hour)
	if a := post(t, srv, "k", payBody); !a.replayed || a.charge != first.charge {
		t.Errorf("1000h later without KeyLifetime = %+v, want the replay", a)
	}
}

func TestKeyInProgressIsNotForgotten(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := fakeprovider.New(fakeprovider.Config{KeyLifetime: time.Minute, Latency: time.Hour})
		defer fake.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			serve(t, fake, "k", payBody)
		}()
		synctest.Wait()
		time.Sleep(2 * time.Minute) // past the lifetime, still charging
		if a := serve(t, fake, "k", payBody); a.status != http.StatusConflict {
			t.Errorf("the key past its lifetime while its first request charges = %+v, want 409", a)
		}
		<-done
		if st := fake.Stats(); st.Charges != 1 {
			t.Errorf("charges = %d, want 1", st.Charges)
		}
	})
}

// TestForgottenKeyInProgressIsNotForgottenAgain: a key in its second life
// (after one KeyLifetime) is not forgotten while its request charges.
func TestForgottenKeyInProgressIsNotForgottenAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := fakeprovider.New(fakeprovider.Config{KeyLifetime: time.Minute, Latency: time.Hour})
		defer fake.Close()
		serve(t, fake, "k", payBody) // an hour: the key is forgotten at its next request
		done := make(chan struct{})
		go func() {
			defer close(done)
			serve(t, fake, "k", payBody)
		}()
		synctest.Wait()
		time.Sleep(2 * time.Minute) // past the second lifetime, still charging
		if a := serve(t, fake, "k", payBody); a.status != http.StatusConflict {
			t.Errorf("the key past its second lifetime while it charges = %+v, want 409", a)
		}
		<-done
		if st := fake.Stats(); st.Charges != 2 {
			t.Errorf("charges = %d, want 2", st.Charges)
		}
	})
}

// TestKeyLivesNeverMeetOtherKeys: a key's second life is stored apart
// from a key that spells its generation's scope and the key together.
func TestKeyLivesNeverMeetOtherKeys(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now()}
	_, srv := start(t, fakeprovider.Config{KeyLifetime: time.Hour, Now: clk.now})
	other := post(t, srv, "gen1#k", payBody)
	post(t, srv, "k", payBody)
	clk.advance(time.Hour)
	if a := post(t, srv, "k", payBody); a.status != http.StatusOK || a.replayed || a.charge.ID == other.charge.ID {
		t.Errorf("key k in its second life = %+v, want its own charge, not key gen1#k's %s", a, other.charge.ID)
	}
}

// TestChargeLog: charges are logged by payment id in the order they were
// made; replays and failures before charging are not charges.
func TestChargeLog(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, fakeprovider.Config{FailFirst: func(key string, _ provider.Payment) bool { return key == "k2" }})
	for _, c := range []struct{ key, id string }{{"k1", "pay_1"}, {"k2", "pay_2"}, {"k3", "pay_3"}, {"k1", "pay_1"}, {"k2", "pay_2"}} {
		post(t, srv, c.key, `{"payment_id":"`+c.id+`","amount":100,"currency":"EUR"}`)
	}
	if got, want := fake.Stats().ChargeLog, []string{"pay_1", "pay_3", "pay_2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("charge log %v, want %v", got, want)
	}
}

// TestOnCharge: the hook sees each charge made, with its request, before
// the caller has the answer; a replay and a decline are no charges.
func TestOnCharge(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	_, srv := start(t, fakeprovider.Config{OnCharge: func(r *http.Request, p provider.Payment) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Header.Get("Idempotency-Key")+" "+p.PaymentID)
	}})
	post(t, srv, "k1", payBody)
	post(t, srv, "k1", payBody) // a replay
	post(t, srv, "k2", `{"payment_id":"decline_1","amount":1,"currency":"EUR"}`)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"k1 pay_1"}; !reflect.DeepEqual(seen, want) {
		t.Errorf("OnCharge saw %q, want %q", seen, want)
	}
}
