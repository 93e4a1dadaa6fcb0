// Package tcpproxy is a TCP proxy that injects network faults between a
// client and a real server, for tests whose wire is not HTTP: pgx in front
// of PostgreSQL. internal/faultproxy does the same for HTTP requests.
//
// A test starts a Proxy on 127.0.0.1 in front of the server's address and
// points the client at Addr. Every connection is forwarded byte for byte
// until the test injects a fault:
//
//   - Freeze stops forwarding in both directions on every connection open
//     at that moment, without closing either side: a close by one side is
//     not passed on either. Each side sees a peer that went silent, as
//     behind a dead router or a partitioned network; the server never
//     learns that the client gave up. New connections are not frozen.
//     Thaw forwards again what was held.
//   - Cut closes both sides of every connection open at that moment: each
//     side sees the connection end.
//
// Close stops accepting and closes every connection.
package tcpproxy
