package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	saslaws "github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The SASL mechanisms KAFKA_SASL_MECHANISM names.
const (
	mechPlain     = "PLAIN"
	mechScram256  = "SCRAM-SHA-256"
	mechScram512  = "SCRAM-SHA-512"
	mechAWSMSKIAM = "AWS_MSK_IAM"
)

// kafkaSecuritySettings are the Kafka connection's TLS and SASL settings,
// the same for every Kafka client the binary makes (`worker run`'s member,
// `worker setup`'s admin client).
var kafkaSecuritySettings = []namedSetting{
	{"", "kafka-tls", "KAFKA_TLS"},
	{"", "kafka-tls-ca-file", "KAFKA_TLS_CA_FILE"},
	{"", "kafka-sasl-mechanism", "KAFKA_SASL_MECHANISM"},
	{"", "kafka-sasl-username", "KAFKA_SASL_USERNAME"},
	{"", "kafka-sasl-password", "KAFKA_SASL_PASSWORD"},
	{"", "kafka-sasl-password-secret-id", "KAFKA_SASL_PASSWORD_SECRET_ID"},
}

// kafkaSecurity holds the parsed TLS and SASL settings.
type kafkaSecurity struct {
	tls, caFile, mechanism, username *string
	password                         *secret
	// passwordID names a Secrets Manager secret holding the password,
	// read into password by readPassword at start.
	passwordID *string
	// awsCreds gives AWS_MSK_IAM its credentials; defaults to the AWS
	// SDK's chain, as for SQS and DynamoDB.
	awsCreds func(ctx context.Context) (saslaws.Auth, error)
}

// defineKafkaSecurity defines the flags of kafkaSecuritySettings.
func defineKafkaSecurity(s *settings) kafkaSecurity {
	k := kafkaSecuritySettings
	return kafkaSecurity{
		tls: s.String(k[0].flag, k[0].env, "",
			"Kafka: connect with TLS, on or off (default: on when KAFKA_TLS_CA_FILE is set or KAFKA_SASL_MECHANISM is AWS_MSK_IAM, else off)"),
		caFile: s.String(k[1].flag, k[1].env, "",
			"Kafka: PEM file of the certificate authorities to trust instead of the system's (implies KAFKA_TLS=on)"),
		mechanism: s.String(k[2].flag, k[2].env, "",
			"Kafka: SASL mechanism, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or AWS_MSK_IAM (credentials from the AWS SDK's chain) (default: no SASL)"),
		username: s.String(k[3].flag, k[3].env, "", "Kafka: SASL username (PLAIN and SCRAM)"),
		password: s.Secret(k[4].flag, k[4].env, "Kafka: SASL password (PLAIN and SCRAM); never printed"),
		passwordID: s.String(k[5].flag, k[5].env, "",
			"Kafka: Secrets Manager secret (name or ARN) holding KAFKA_SASL_PASSWORD, read at start instead"),
	}
}

// set reports whether any TLS or SASL setting has a value.
func (k kafkaSecurity) set() (namedSetting, bool) {
	for i, v := range []string{*k.tls, *k.caFile, *k.mechanism, *k.username, k.password.Value(), *k.passwordID} {
		if v != "" {
			return kafkaSecuritySettings[i], true
		}
	}
	return namedSetting{}, false
}

// options checks the settings and returns the franz-go options they make:
// TLS (with the CA file read now) and SASL, and with SASL the watch that
// tells a refused authentication apart. A bad value or combination is a
// usage error naming the setting.
func (k kafkaSecurity) options() ([]kgo.Opt, *saslWatch, error) {
	opts, err := k.clientOptions()
	if err != nil || *k.mechanism == "" {
		return opts, nil, err
	}
	w := &saslWatch{mechanism: strings.ToUpper(strings.TrimSpace(*k.mechanism)), username: *k.username}
	return append(opts, kgo.WithHooks(w)), w, nil
}

func (k kafkaSecurity) clientOptions() ([]kgo.Opt, error) {
	ss := kafkaSecuritySettings
	mech := strings.ToUpper(strings.TrimSpace(*k.mechanism))
	user := *k.username
	pass := k.password.Value() != "" || *k.passwordID != "" // a password, or where to read it
	if k.password.Value() != "" && *k.passwordID != "" {
		return nil, usagef("%s and %s are both set: give the password one way", ss[4], ss[5])
	}
	var opts []kgo.Opt
	switch mech {
	case "":
		if user != "" || pass {
			return nil, usagef("%s and %s are for SASL: set %s too (%s, %s, %s or %s)",
				ss[3], ss[4], ss[2], mechPlain, mechScram256, mechScram512, mechAWSMSKIAM)
		}
	case mechPlain, mechScram256, mechScram512:
		if user == "" || !pass {
			return nil, usagef("%s %s needs %s and %s (or %s)", ss[2], mech, ss[3], ss[4], ss[5])
		}
		// The password is read when a connection authenticates: by then
		// readPassword has filled it in from KAFKA_SASL_PASSWORD_SECRET_ID.
		password := k.password
		var m sasl.Mechanism
		switch mech {
		case mechPlain:
			m = plain.Plain(func(context.Context) (plain.Auth, error) {
				return plain.Auth{User: user, Pass: password.Value()}, nil
			})
		case mechScram256:
			m = scram.Sha256(func(context.Context) (scram.Auth, error) {
				return scram.Auth{User: user, Pass: password.Value()}, nil
			})
		default:
			m = scram.Sha512(func(context.Context) (scram.Auth, error) {
				return scram.Auth{User: user, Pass: password.Value()}, nil
			})
		}
		opts = append(opts, kgo.SASL(m))
	case mechAWSMSKIAM:
		if user != "" || pass {
			return nil, usagef("%s %s takes its credentials from the AWS SDK (AWS_ACCESS_KEY_ID, a role, ...): unset %s and %s (or %s)",
				ss[2], mech, ss[3], ss[4], ss[5])
		}
		creds := k.awsCreds
		if creds == nil {
			creds = awsChainCreds()
		}
		opts = append(opts, kgo.SASL(saslaws.ManagedStreamingIAM(creds)))
	default:
		return nil, usagef("%s %q: want %s, %s, %s or %s", ss[2], *k.mechanism, mechPlain, mechScram256, mechScram512, mechAWSMSKIAM)
	}

	on, err := k.tlsOn()
	if err != nil {
		return nil, err
	}
	if !on {
		return opts, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if *k.caFile != "" {
		pem, err := os.ReadFile(*k.caFile)
		if err != nil {
			return nil, usagef("%s: %v", ss[1], err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("%s %s: no PEM certificate in it", ss[1], *k.caFile)
		}
		tc.RootCAs = pool
	}
	// franz-go sets each broker's ServerName from its host.
	return append(opts, kgo.DialTLSConfig(tc)), nil
}

// tlsOn reports whether the connection uses TLS: KAFKA_TLS if set, else
// whether a CA file is given or the mechanism is AWS_MSK_IAM.
func (k kafkaSecurity) tlsOn() (bool, error) {
	ss := kafkaSecuritySettings
	mech := strings.ToUpper(strings.TrimSpace(*k.mechanism))
	on := *k.caFile != "" || mech == mechAWSMSKIAM
	v := strings.TrimSpace(*k.tls)
	if v == "" {
		return on, nil
	}
	on, err := parseOnOff(v)
	switch {
	case err != nil:
		return false, usagef("%s %q: want on or off", ss[0], v)
	case !on && *k.caFile != "":
		return false, usagef("%s is off, but %s is set: a CA file is for TLS", ss[0], ss[1])
	case !on && mech == mechAWSMSKIAM:
		return false, usagef("%s is off, but %s is %s, which MSK accepts over TLS only", ss[0], ss[2], mech)
	}
	return on, nil
}

// cleartextPassword reports whether the settings send a password as it is
// over a connection without TLS: PLAIN without KAFKA_TLS.
func (k kafkaSecurity) cleartextPassword() bool {
	on, err := k.tlsOn()
	return err == nil && !on && strings.EqualFold(strings.TrimSpace(*k.mechanism), mechPlain)
}

// readPassword reads the SASL password from KAFKA_SASL_PASSWORD_SECRET_ID's
// secret in Secrets Manager, if it is set, before the first connection.
func (k kafkaSecurity) readPassword(ctx context.Context) error {
	if *k.passwordID == "" {
		return nil
	}
	cfg, err := loadAWSConfig(ctx, false)
	if err != nil {
		return err
	}
	v, err := readNamedSecret(ctx, secretsmanager.NewFromConfig(cfg), kafkaSecuritySettings[5].env, *k.passwordID)
	if err != nil {
		return err
	}
	*k.password = v
	return nil
}

// parseOnOff parses on/off as well as strconv.ParseBool's values.
func parseOnOff(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "on", "yes":
		return true, nil
	case "off", "no":
		return false, nil
	}
	return strconv.ParseBool(v)
}

// awsChainCreds returns AWS_MSK_IAM's credentials from the AWS SDK's
// default chain, loaded once and refreshed by the SDK as they expire.
func awsChainCreds() func(ctx context.Context) (saslaws.Auth, error) {
	var (
		once  sync.Once
		creds aws.CredentialsProvider
		err   error
	)
	return func(ctx context.Context) (saslaws.Auth, error) {
		once.Do(func() {
			var cfg aws.Config
			if cfg, err = loadAWSConfig(ctx, true); err == nil {
				creds = cfg.Credentials
			}
		})
		if err != nil {
			return saslaws.Auth{}, err
		}
		if creds == nil {
			return saslaws.Auth{}, fmt.Errorf("%s %s: no AWS credentials", kafkaSecuritySettings[2], mechAWSMSKIAM)
		}
		c, err := creds.Retrieve(ctx)
		if err != nil {
			return saslaws.Auth{}, fmt.Errorf("%s %s: AWS credentials: %w", kafkaSecuritySettings[2], mechAWSMSKIAM, err)
		}
		return saslaws.Auth{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken}, nil
	}
}

// secSet reports whether any of k's settings has a value.
func secSet(k kafkaSecurity) bool {
	_, set := k.set()
	return set
}

// errSASLRefused is the cause a start ends with when the brokers refused
// the SASL credentials.
var errSASLRefused = errors.New("Kafka refused the SASL authentication")

// saslWatch notices brokers that close the connection in answer to the
// SASL credentials (as kfake does; Kafka answers SASL_AUTHENTICATION_FAILED,
// which franz-go returns at once), which franz-go would retry as a
// connection error until the start's deadline, and ends the start with
// errSASLRefused instead.
type saslWatch struct {
	mechanism, username string

	mu     sync.Mutex
	fails  int
	cancel context.CancelCauseFunc
}

// saslRefusals is how many SASLAuthenticate requests of one start must go
// unanswered before the credentials are taken as refused: one could be the
// network.
const saslRefusals = 2

var _ kgo.HookBrokerE2E = (*saslWatch)(nil)

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (w *saslWatch) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != int16(kmsg.SASLAuthenticate) {
		return
	}
	if e2e.Err() == nil {
		return // a SCRAM exchange's first step is answered even for a wrong password
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fails++; w.fails >= saslRefusals && w.cancel != nil {
		w.cancel(w.refused(e2e.Err()))
	}
}

func (w *saslWatch) refused(err error) error {
	ss := kafkaSecuritySettings
	who := ""
	if w.username != "" {
		who = fmt.Sprintf(" for %s %q", ss[3].env, w.username)
	}
	return fmt.Errorf("%w (%s %s%s): the broker closed the connection in answer to the credentials (%w); check %s and %s",
		errSASLRefused, ss[2].env, w.mechanism, who, err, ss[3].env, ss[4].env)
}

// during returns a context for a start (a client's first requests) that
// ends with errSASLRefused as its cause if the credentials are refused, and
// a function that ends the watch and returns the error to report instead
// of err: the refusal, if that is what ended the start. w may be nil.
func (w *saslWatch) during(ctx context.Context) (context.Context, func(err error) error) {
	if w == nil {
		return ctx, func(err error) error { return err }
	}
	ctx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	w.cancel, w.fails = cancel, 0
	w.mu.Unlock()
	return ctx, func(err error) error {
		w.mu.Lock()
		w.cancel = nil
		w.mu.Unlock()
		cause := context.Cause(ctx)
		cancel(nil)
		if err != nil && errors.Is(cause, errSASLRefused) {
			return cause
		}
		return err
	}
}
