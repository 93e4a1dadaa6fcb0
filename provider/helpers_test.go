package provider_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func pay(id string) provider.Payment {
	return provider.Payment{PaymentID: id, Amount: 1999, Currency: "EUR"}
}

// startFake serves a fake provider over real HTTP until the test ends.
func startFake(t *testing.T, cfg fakeprovider.Config) (*fakeprovider.Server, *httptest.Server) {
	t.Helper()
	return fakeprovider.StartTest(t, cfg)
}

// serve serves h over real HTTP until the test ends.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// fastConfig is a client configuration for tests: quick retries.
func fastConfig(baseURL string) provider.Config {
	return provider.Config{
		BaseURL:     baseURL,
		Timeout:     5 * time.Second,
		MaxAttempts: 4,
		MinBackoff:  time.Millisecond,
		MaxBackoff:  10 * time.Millisecond,
	}
}

func newClient(t *testing.T, cfg provider.Config) *provider.Client {
	t.Helper()
	c, err := provider.NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// asError returns err as a *provider.Error or fails the test.
func asError(t *testing.T, err error) *provider.Error {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *provider.Error", err, err)
	}
	return pe
}

// wantStats compares the counters of st that matter to a test.
func wantStats(t *testing.T, got fakeprovider.Stats, want fakeprovider.Stats) {
	t.Helper()
	got.ChargesByPayment, want.ChargesByPayment = nil, nil
	got.ChargeLog, want.ChargeLog = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats = %+v, want %+v", got, want)
	}
}
