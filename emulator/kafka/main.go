// Command kafka serves an in-process Kafka cluster (franz-go's kfake) on
// free 127.0.0.1 ports until it is sent SIGTERM or SIGINT, for tests and
// local development. It prints one line, "KAFKA_BROKERS=host:port,...",
// when the brokers accept connections; with -pid-file it writes its PID
// there too.
//
//	go run ./emulator/kafka -brokers 1
//
// kfake is not Kafka: it keeps every record in memory (nothing survives the
// process), has no replication, acks or log truncation to model, and
// enforces no quotas. Its classic group coordinator can wedge for good when
// a group's leader dies between JoinGroup and SyncGroup, or when every
// member is killed at once, which a real broker survives: tests kill one
// member at a time while the group is stable.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("kafka", flag.ContinueOnError)
	brokers := fs.Int("brokers", 1, "number of brokers")
	partitions := fs.Int("partitions", 4, "partitions of a topic created without a count")
	minSession := fs.Duration("min-session-timeout", 100*time.Millisecond, "shortest session timeout a group member may ask for")
	pidFile := fs.String("pid-file", "", "write the process id to this file once serving")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *brokers < 1 || *partitions < 1 {
		fmt.Fprintln(os.Stderr, "kafka: -brokers and -partitions must be at least 1")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	c, err := kfake.NewCluster(
		kfake.NumBrokers(*brokers),
		kfake.DefaultNumPartitions(*partitions),
		kfake.AllowAutoTopicCreation(),
		kfake.GroupMinSessionTimeout(*minSession),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		return 1
	}
	defer c.Close()
	if *pidFile != "" {
		if err := os.WriteFile(*pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "kafka:", err)
			return 1
		}
	}
	fmt.Printf("KAFKA_BROKERS=%s\n", strings.Join(c.ListenAddrs(), ","))
	<-ctx.Done()
	return 0
}
