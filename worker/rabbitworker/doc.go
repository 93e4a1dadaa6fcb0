// Package rabbitworker is the RabbitMQ transport of the worker protocol
// (package worker): it consumes one queue with manual acks and runs
// worker.Engine on each delivery, so that a lost ack, a dropped connection
// and a crashed consumer charge nothing twice.
//
// # Topology
//
// Setup declares it (the binary's `worker setup`):
//
//	<queue>      quorum queue: x-delivery-limit (DefaultDeliveryLimit),
//	             x-dead-letter-exchange <queue>.dlx,
//	             x-dead-letter-strategy at-least-once, x-overflow reject-publish
//	<queue>.dlx  direct exchange, bound to the dead-letter queue
//	<queue>.dlq  quorum queue: the dead letters
//	<queue>.delay quorum queue: x-message-ttl (Topology.DelayTTL),
//	             dead-lettering at-least-once back to <queue> through
//	             <queue>.dlx (to which <queue> is bound by its own name)
//
// The worker dead-letters poison and reused keys itself: it publishes the
// message to the dead-letter queue (default exchange, mandatory, publisher
// confirms) with the headers ReasonHeader, AttemptHeader and KeyHeader,
// and acks the delivery only once the broker confirmed the publish; an
// unconfirmed or returned publish acks nothing. The broker dead-letters
// by itself a message delivered DeliveryLimit times without an ack (a
// message that crashes every consumer it reaches): that is the crash-loop
// backstop, as maxReceiveCount is on SQS; those dead letters carry the
// broker's x-death headers (reason delivery_limit) instead of ours.
//
// At start the worker checks that both queues exist and says in its log
// when the queue is not the quorum queue Setup declares: a classic queue
// refuses x-delivery-limit, so nothing stops a crash loop there.
//
// # Connections
//
// The transport owns reconnection: each incarnation is a new connection
// with a consuming channel (prefetch = Concurrency) and a publishing
// channel in confirm mode; after the broker is lost it reconnects with
// backoff (MinReconnect to MaxReconnect) and Health says why it is not
// ready. A delivery is acked, requeued or dead-lettered on the channel it
// came on, or not at all: delivery tags are numbered per channel, and an
// ack sent on a later channel with an old tag would settle another
// message (which is what a client that recovers connections under its
// caller does). When a connection ends the broker requeues what it had
// delivered on it; a handler still running keeps its claim renewed, its
// late ack is dropped, and the redelivery finds the key held (it waits)
// or completed (acked as a duplicate). When the broker cancels the
// consumer (queue deleted, leader moved) the worker reconnects, and stops
// with ErrQueueGone if the queue no longer exists.
//
// # Leases, holds and consumer_timeout
//
// RabbitMQ has no visibility timeout: a delivery stays with its consumer
// until acked or its connection ends. The claim's lease stands alone
// (Lease, renewed every HeartbeatInterval while the handler runs; renewing
// it pushes nothing on the broker). The broker's only bound on an unacked
// delivery is consumer_timeout (30 minutes by default, checked about once
// a minute), after which it closes the channel. Every hold stays well
// under it: HoldFor (failures retried in process, under the claim, with
// backoff, the delivery unacked) plus MaxReturnDelay plus Lease must fit
// in ConsumerTimeout less five minutes, or New refuses the configuration,
// and the handler's context ends a minute before ConsumerTimeout.
//
// # Returning a delivery
//
// The broker has no delayed redelivery, so a delivery to come back later
// (a failure once HoldFor is spent, a duplicate whose key is held
// elsewhere) within MaxReturnDelay is kept unacked for its delay and then
// requeued (basic.reject with requeue). A longer delay goes through the
// delay queue: the message is published there (mandatory, confirmed) with
// NotBeforeHeader and AttemptsHeader, then acked; a refused publish acks
// nothing and the delivery is requeued after MaxReturnDelay. The delay
// queue has one TTL for all its messages (a per-message expiration would
// block: the broker expires only a queue's head), and dead-letters them
// back to the queue; one not yet due takes another hop, or waits the rest
// unacked if within MaxReturnDelay. Never a hot requeue loop. The broker
// counts the deliveries of what comes back from zero: Attempt adds
// AttemptsHeader, and the worker dead-letters a delivery whose attempts
// passed DeliveryLimit (reason ReasonDeliveryLimit) rather than delay it
// again. On
// RabbitMQ 3.x a quorum queue counts every return toward
// x-delivery-limit, a requeue as much as a lost connection; RabbitMQ 4
// stops counting some explicit returns. The retry delays are sized for
// the conservative case: the deliveries left before DeliveryLimit span
// Protocol.OutageCover.
//
// # The message
//
// Message.ID is the publisher's message_id (KeyFromMessageID needs
// publishers that set it; a business key from the body does not),
// Attempt is the quorum queue's x-delivery-count plus one (on a classic
// queue 1, or 2 when the redelivered flag is set), Redelivered is the
// delivery's redelivered flag, Attributes are the string and integer
// headers, and Native is the amqp091.Delivery
// (github.com/rabbitmq/amqp091-go).
package rabbitworker
