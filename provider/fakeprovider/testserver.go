package fakeprovider

import (
	"net/http/httptest"
	"testing"
)

// StartTest serves a fake provider with cfg over real HTTP on loopback until
// the test ends, for tests of code that charges through the provider client.
// Pass the returned server's URL as provider.Config.BaseURL.
func StartTest(tb testing.TB, cfg Config) (*Server, *httptest.Server) {
	tb.Helper()
	fake := New(cfg)
	srv := httptest.NewServer(fake)
	tb.Cleanup(srv.Close)
	tb.Cleanup(fake.Close) // runs first: releases held answers so srv.Close need not wait
	return fake, srv
}
