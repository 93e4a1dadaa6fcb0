package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// kafkaPassword is the SASL password of the tests' bad settings: no
// output may show it.
const kafkaPassword = "hunter2-do-not-print"

// TestKafkaSecurityBadSettings: a bad TLS or SASL setting, or a bad
// combination, is exit 2 with one line naming the setting, before anything
// is dialled, for `worker run` and `worker setup`; the password is never in
// the output.
func TestKafkaSecurityBadSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kafka := map[string]string{"KAFKA_BROKERS": "127.0.0.1:1", "KAFKA_TOPIC": "payments", "KAFKA_GROUP": "g", "CLAIM_TABLE": "claims"}
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"mechanism without username", map[string]string{"KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_PASSWORD": kafkaPassword},
			"KAFKA_SASL_MECHANISM (-kafka-sasl-mechanism) PLAIN needs KAFKA_SASL_USERNAME (-kafka-sasl-username) and KAFKA_SASL_PASSWORD (-kafka-sasl-password) (or KAFKA_SASL_PASSWORD_SECRET_ID"},
		{"mechanism without password", map[string]string{"KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "alice"},
			"KAFKA_SASL_MECHANISM (-kafka-sasl-mechanism) SCRAM-SHA-512 needs"},
		{"unknown mechanism", map[string]string{"KAFKA_SASL_MECHANISM": "GSSAPI", "KAFKA_SASL_USERNAME": "alice", "KAFKA_SASL_PASSWORD": kafkaPassword},
			`KAFKA_SASL_MECHANISM (-kafka-sasl-mechanism) "GSSAPI": want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or AWS_MSK_IAM`},
		{"username without mechanism", map[string]string{"KAFKA_SASL_USERNAME": "alice", "KAFKA_SASL_PASSWORD": kafkaPassword},
			"set KAFKA_SASL_MECHANISM (-kafka-sasl-mechanism) too"},
		{"MSK IAM with a password", map[string]string{"KAFKA_SASL_MECHANISM": "AWS_MSK_IAM", "KAFKA_SASL_USERNAME": "alice", "KAFKA_SASL_PASSWORD": kafkaPassword},
			"takes its credentials from the AWS SDK"},
		{"MSK IAM without TLS", map[string]string{"KAFKA_SASL_MECHANISM": "AWS_MSK_IAM", "KAFKA_TLS": "off"},
			"KAFKA_TLS (-kafka-tls) is off, but KAFKA_SASL_MECHANISM"},
		{"CA file missing", map[string]string{"KAFKA_TLS_CA_FILE": filepath.Join(dir, "absent.pem")},
			"KAFKA_TLS_CA_FILE (-kafka-tls-ca-file): open "},
		{"CA file without a certificate", map[string]string{"KAFKA_TLS_CA_FILE": notPEM},
			"KAFKA_TLS_CA_FILE (-kafka-tls-ca-file) " + notPEM + ": no PEM certificate in it"},
		{"CA file with TLS off", map[string]string{"KAFKA_TLS_CA_FILE": notPEM, "KAFKA_TLS": "off"},
			"KAFKA_TLS (-kafka-tls) is off, but KAFKA_TLS_CA_FILE"},
		{"password given twice", map[string]string{"KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "alice",
			"KAFKA_SASL_PASSWORD": kafkaPassword, "KAFKA_SASL_PASSWORD_SECRET_ID": "kafka-password"},
			"KAFKA_SASL_PASSWORD (-kafka-sasl-password) and KAFKA_SASL_PASSWORD_SECRET_ID (-kafka-sasl-password-secret-id) are both set"},
		{"secret id without mechanism", map[string]string{"KAFKA_SASL_PASSWORD_SECRET_ID": "kafka-password"},
			"set KAFKA_SASL_MECHANISM (-kafka-sasl-mechanism) too"},
		{"TLS neither on nor off", map[string]string{"KAFKA_TLS": "maybe"},
			`KAFKA_TLS (-kafka-tls) "maybe": want on or off`},
	}
	for _, tc := range tests {
		for _, cmd := range []string{"run", "setup"} {
			env := map[string]string{}
			for k, v := range kafka {
				env[k] = v
			}
			for k, v := range tc.env {
				env[k] = v
			}
			code, stdout, stderr := runWorker(t, env, cmd)
			if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("%s, %s: exit %d, stderr %q; want exit 2 and one line with %q", tc.name, cmd, code, stderr, tc.want)
			}
			if strings.Contains(stdout+stderr, kafkaPassword) {
				t.Errorf("%s, %s: the password is in the output:\n%s%s", tc.name, cmd, stdout, stderr)
			}
		}
	}
	// A Kafka setting on another broker is refused, not ignored.
	for _, cmd := range []string{"run", "setup"} {
		env := map[string]string{"QUEUE_URL": "http://127.0.0.1:1/000000000000/q", "CLAIM_TABLE": "claims",
			"KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "alice", "KAFKA_SASL_PASSWORD": kafkaPassword}
		code, stdout, stderr := runWorker(t, env, cmd)
		if code != 2 || !strings.Contains(stderr, "KAFKA_SASL_MECHANISM (-kafka-sasl-mechanism) is set, but it applies to Kafka") ||
			strings.Contains(stdout+stderr, kafkaPassword) {
			t.Errorf("SQS with a Kafka SASL setting, %s: exit %d, stderr %q", cmd, code, stderr)
		}
	}
}

// TestKafkaSecurityHelpShowsNoPassword: the help lists every TLS and SASL
// setting and never shows the password set in the environment.
func TestKafkaSecurityHelpShowsNoPassword(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "setup"} {
		code, stdout, stderr := runWorker(t, map[string]string{"KAFKA_SASL_PASSWORD": kafkaPassword}, cmd, "-h")
		if code != 0 {
			t.Fatalf("%s -h: exit %d", cmd, code)
		}
		for _, n := range kafkaSecuritySettings {
			if !strings.Contains(stdout, "-"+n.flag) || !strings.Contains(stdout, "(env "+n.env+")") {
				t.Errorf("%s -h lacks -%s (env %s)", cmd, n.flag, n.env)
			}
		}
		if strings.Contains(stdout+stderr, kafkaPassword) {
			t.Errorf("%s -h shows the password", cmd)
		}
	}
}

// kafkaConnect connects as the binary does, with env as its whole
// environment, for the commands named in cmds: `worker setup`'s client
// creates the topics; `worker run`'s member is built (kafkaworker.New reads
// the topic's retention over the connection) and stopped.
func kafkaConnect(ctx context.Context, t *testing.T, env map[string]string, cmds string) error {
	t.Helper()
	getenv := func(k string) string { return env[k] }
	if strings.Contains(cmds, "setup") {
		s := newSettings("setup", stdio{getenv: getenv, stdout: io.Discard, stderr: io.Discard})
		k := defineKafkaSetup(s)
		if err := s.Parse(nil); err != nil {
			return err
		}
		if _, err := k.setup(ctx, io.Discard); err != nil {
			return err
		}
	}
	if !strings.Contains(cmds, "run") {
		return nil
	}
	s := newSettings("run", stdio{getenv: getenv, stdout: io.Discard, stderr: io.Discard})
	b := defineBrokerFlags(s)
	if err := s.Parse(nil); err != nil {
		return err
	}
	_, start, err := b.choose(sqsworker.Config{}, 1000*time.Hour)
	if err != nil {
		return err
	}
	p := worker.Protocol{
		Store:   memory.New(memory.Config{}),
		Handler: worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) { return "", nil }),
		Logger:  slog.New(slog.DiscardHandler),
	}
	c, err := start(ctx, &app{log: slog.New(slog.DiscardHandler)}, p)
	if err != nil {
		return err
	}
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	return c.run(stopped) // joins nothing: leaves and closes the client
}

// kafkaAttempt runs kafkaConnect and fails the test if it takes longer
// than a refusal should: a wrong password or certificate is an error, not
// a hang.
func kafkaAttempt(t *testing.T, env map[string]string, cmds string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	start := time.Now()
	err := kafkaConnect(ctx, t, env, cmds)
	if ctx.Err() != nil {
		t.Fatalf("connecting took %s and was cut off: a refusal must be an error, not a hang (error: %v)", time.Since(start).Round(time.Millisecond), err)
	}
	if err != nil && strings.Contains(err.Error(), kafkaPassword) {
		t.Errorf("the error shows the password: %v", err)
	}
	return err
}

// kafkaEnv is the settings of a connection to addrs, with more.
func kafkaEnv(addrs []string, more map[string]string) map[string]string {
	env := map[string]string{"KAFKA_BROKERS": strings.Join(addrs, ","), "KAFKA_TOPIC": "payments", "KAFKA_GROUP": "charges"}
	for k, v := range more {
		env[k] = v
	}
	return env
}

// TestKafkaSASL: against kfake with SASL on and one user, the binary's
// Kafka clients connect with the user's mechanism and password, and are
// refused, with an error that says so and promptly, with a wrong password
// or without SASL.
func TestKafkaSASL(t *testing.T) {
	t.Parallel()
	for _, mech := range []string{mechPlain, mechScram256, mechScram512} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(mech, "alice", kafkaPassword))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			addrs := c.ListenAddrs()
			user := map[string]string{"KAFKA_SASL_MECHANISM": mech, "KAFKA_SASL_USERNAME": "alice", "KAFKA_SASL_PASSWORD": kafkaPassword}
			if err := kafkaAttempt(t, kafkaEnv(addrs, user), "setup run"); err != nil {
				t.Fatalf("right password: %v", err)
			}
			topicsExist(t, addrs, saslMechanism(t, mech, "alice", kafkaPassword))

			wrong := kafkaEnv(addrs, user)
			wrong["KAFKA_SASL_PASSWORD"] = "not-" + kafkaPassword
			for _, cmd := range []string{"setup", "run"} {
				err := kafkaAttempt(t, wrong, cmd)
				if !errors.Is(err, errSASLRefused) || !strings.Contains(err.Error(), "KAFKA_SASL_PASSWORD") {
					t.Errorf("wrong password, %s: %v; want the refusal, naming the settings", cmd, err)
				}
				t.Logf("wrong password, %s: %v", cmd, err)
			}
			err = kafkaAttempt(t, kafkaEnv(addrs, nil), "setup")
			if err == nil {
				t.Errorf("no SASL: connected to a cluster that requires it")
			}
			t.Logf("no SASL: %v", err)
		})
	}
}

// saslMechanism is the mechanism the binary would make, through its own
// settings.
func saslMechanism(t *testing.T, mech, user, pass string) kgo.Opt {
	t.Helper()
	s := newSettings("run", stdio{getenv: func(k string) string {
		return map[string]string{"KAFKA_SASL_MECHANISM": mech, "KAFKA_SASL_USERNAME": user, "KAFKA_SASL_PASSWORD": pass}[k]
	}, stdout: io.Discard, stderr: io.Discard})
	k := defineKafkaSecurity(s)
	if err := s.Parse(nil); err != nil {
		t.Fatal(err)
	}
	opts, err := k.clientOptions()
	if err != nil || len(opts) != 1 {
		t.Fatalf("options: %d, %v", len(opts), err)
	}
	return opts[0]
}

// topicsExist checks, with a client of its own made with opts, that
// `worker setup` created the topic and its dead-letter topic.
func topicsExist(t *testing.T, addrs []string, opts ...kgo.Opt) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ts, err := kadm.NewClient(cl).ListTopics(t.Context(), "payments", "payments-dlt")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"payments", "payments-dlt"} {
		if !ts.Has(name) {
			t.Errorf("topic %s was not created", name)
		}
	}
}

// TestKafkaTLS: against kfake listening with TLS on a certificate of a CA
// made here, the binary's clients connect with KAFKA_TLS_CA_FILE (and with
// SCRAM over TLS), and are refused promptly, with an error naming the
// certificate, without it.
func TestKafkaTLS(t *testing.T) {
	t.Parallel()
	caFile, serverCert := testCA(t)
	for _, withSASL := range []bool{false, true} {
		opts := []kfake.Opt{kfake.NumBrokers(1), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12})}
		more := map[string]string{"KAFKA_TLS_CA_FILE": caFile}
		if withSASL {
			opts = append(opts, kfake.EnableSASL(), kfake.Superuser(mechScram256, "alice", kafkaPassword))
			more["KAFKA_SASL_MECHANISM"], more["KAFKA_SASL_USERNAME"], more["KAFKA_SASL_PASSWORD"] = mechScram256, "alice", kafkaPassword
		}
		c, err := kfake.NewCluster(opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		addrs := c.ListenAddrs()
		if err := kafkaAttempt(t, kafkaEnv(addrs, more), "setup run"); err != nil {
			t.Fatalf("SASL %t, with the CA file: %v", withSASL, err)
		}
		if withSASL {
			// kfake has no AWS_MSK_IAM: the mechanism reaches the broker,
			// which refuses it, at once and saying so.
			msk := kafkaEnv(addrs, map[string]string{"KAFKA_TLS_CA_FILE": caFile, "KAFKA_SASL_MECHANISM": mechAWSMSKIAM})
			err := kafkaAttempt(t, msk, "setup")
			if err == nil || !strings.Contains(err.Error(), "UNSUPPORTED_SASL_MECHANISM") {
				t.Errorf("AWS_MSK_IAM at kfake: %v; want the broker's UNSUPPORTED_SASL_MECHANISM", err)
			}
			t.Logf("AWS_MSK_IAM at kfake: %v", err)
			continue
		}
		pool := x509.NewCertPool()
		pem, _ := os.ReadFile(caFile)
		pool.AppendCertsFromPEM(pem)
		topicsExist(t, addrs, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))

		// TLS on, the system's CAs: the certificate is refused.
		for _, cmd := range []string{"setup", "run"} {
			err = kafkaAttempt(t, kafkaEnv(addrs, map[string]string{"KAFKA_TLS": "on"}), cmd)
			var unknown x509.UnknownAuthorityError
			if err == nil || !errors.As(err, &unknown) && !strings.Contains(err.Error(), "certificate") {
				t.Errorf("TLS without the CA file, %s: %v; want an error about the certificate", cmd, err)
			}
			t.Logf("TLS without the CA file, %s: %v", cmd, err)
		}
	}
}

// testCA writes a new CA's certificate to a PEM file and returns its path
// and a server certificate it signed for 127.0.0.1.
func testCA(t *testing.T) (caFile string, server tls.Certificate) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "claimfirst test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey := key()
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
}

// TestKafkaCleartextPassword: PLAIN without TLS is the one setting that
// sends the password as it is, which run and setup warn of.
func TestKafkaCleartextPassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"KAFKA_SASL_MECHANISM": "PLAIN"}, true},
		{map[string]string{"KAFKA_SASL_MECHANISM": "plain", "KAFKA_TLS": "off"}, true},
		{map[string]string{"KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_TLS": "on"}, false},
		{map[string]string{"KAFKA_SASL_MECHANISM": "SCRAM-SHA-256"}, false},
		{map[string]string{}, false},
	} {
		s := newSettings("run", stdio{getenv: func(k string) string { return tc.env[k] }, stdout: io.Discard, stderr: io.Discard})
		k := defineKafkaSecurity(s)
		if err := s.Parse(nil); err != nil {
			t.Fatal(err)
		}
		if got := k.cleartextPassword(); got != tc.want {
			t.Errorf("%v: cleartext password %t, want %t", tc.env, got, tc.want)
		}
	}
}

// TestKafkaSASLPasswordFromSecretsManager: with
// KAFKA_SASL_PASSWORD_SECRET_ID the password is read from Secrets Manager
// (the emulator's) at start, and the binary's clients authenticate with
// it; an absent secret is an error naming the setting.
func TestKafkaSASLPasswordFromSecretsManager(t *testing.T) {
	t.Parallel()
	api := secretsmanager.NewFromConfig(awstest.Config(t))
	name := awstest.Name("kafka-password")
	if _, err := api.CreateSecret(t.Context(), &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(kafkaPassword + "\n")}); err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(mechScram512, "alice", kafkaPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	env := kafkaEnv(c.ListenAddrs(), map[string]string{"KAFKA_SASL_MECHANISM": mechScram512, "KAFKA_SASL_USERNAME": "alice", "KAFKA_SASL_PASSWORD_SECRET_ID": name})
	if err := kafkaAttempt(t, env, "setup run"); err != nil {
		t.Fatalf("password from Secrets Manager: %v", err)
	}
	env["KAFKA_SASL_PASSWORD_SECRET_ID"] = awstest.Name("absent")
	if err := kafkaAttempt(t, env, "setup"); err == nil || !strings.Contains(err.Error(), "KAFKA_SASL_PASSWORD_SECRET_ID") {
		t.Errorf("absent secret: %v; want an error naming KAFKA_SASL_PASSWORD_SECRET_ID", err)
	}
}
