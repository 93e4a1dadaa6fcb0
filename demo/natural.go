package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// shipment is experiment 5's message: order OrderID has now shipped Shipped
// units. It states the order's new state; a handler may still read it as
// "ship one more".
type shipment struct {
	OrderID string `json:"order_id"`
	Shipped int    `json:"shipped"`
}

// Order states in experiment 5's orders table.
const (
	orderPaid    = "PAID"
	orderShipped = "SHIPPED"
)

// order is one row of experiment 5's orders table.
type order struct {
	status  string
	shipped int // units shipped, by the table
}

// orderTable is experiment 5's database: one row per order, each write to a
// row atomic, as a single-item update is.
type orderTable struct {
	mu   sync.Mutex
	rows map[string]*order
}

func newOrderTable(ids []string) *orderTable {
	t := &orderTable{rows: make(map[string]*order, len(ids))}
	for _, id := range ids {
		t.rows[id] = &order{status: orderPaid}
	}
	return t
}

// update applies change to the order's row atomically; change reports
// whether it wrote (false: its condition failed).
func (t *orderTable) update(id string, change func(o *order) bool) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.rows[id]
	if !ok {
		return false, fmt.Errorf("order %s: no such order", id)
	}
	return change(o), nil
}

// shipped returns the units shipped per order.
func (t *orderTable) shipped() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	by := make(map[string]int, len(t.rows))
	for id, o := range t.rows {
		by[id] = o.shipped
	}
	return by
}

// naturalResult is what experiment 5 measured: a shipment message delivered
// twice, the copy arriving while the first is handled, under three handlers
// that write the order without any claim or deduplication.
type naturalResult struct {
	// Increment adds the shipped units to the order: "add one".
	Increment naturalRow
	// Set writes the order's new state: "the new state is X".
	Set naturalRow
	// Conditional writes the new state only if the order is still paid: a
	// state transition whose condition a duplicate fails.
	Conditional naturalRow
}

// naturalRow is one handler's numbers in experiment 5.
type naturalRow struct {
	// Deliveries counts the copies the broker delivered.
	Deliveries int
	// Orders is the number of distinct orders, one shipment message each.
	Orders int
	// Shipped is the units shipped by the orders table, summed: one per
	// order is right.
	Shipped int
	// Writes counts the updates that wrote the order.
	Writes int
	// Rejected counts deliveries whose conditional update found the order
	// already shipped, and wrote nothing.
	Rejected int
	// effects counts the orders shipped more than once, or never.
	effects
}

func (r naturalResult) rows() []tableRow {
	row := func(label string, x naturalRow) tableRow {
		return tableRow{label, []pair{{"deliveries", x.Deliveries}, {"orders", x.Orders}, {"shipped", x.Shipped}}, x.effects}
	}
	return []tableRow{
		row("increment on each delivery", r.Increment),
		row("set the new state", r.Set),
		row("conditional state transition", r.Conditional),
	}
}

// runNatural runs experiment 5: opts.Payments orders, each with one shipment
// message of one unit; 1 in 20 (exactly opts.Payments/20, chosen by
// opts.Seed) is delivered a second time as soon as the first copy is
// received. No handler claims anything: the experiment shows when the write
// itself is idempotent.
func runNatural(ctx context.Context, opts Options) (naturalResult, error) {
	if err := opts.setDefaults(); err != nil {
		return naturalResult{}, err
	}
	ids := make([]string, opts.Payments)
	for i := range ids {
		ids[i] = fmt.Sprintf("ord_%05d", i+1)
	}
	twice := chooseIDs(ids, redeliverEvery, opts.Seed, saltNatural)
	msgs := make([]message, len(ids))
	for i, id := range ids {
		msgs[i] = message{shipment: shipment{OrderID: id, Shipped: 1}, receives: 1, echo: twice[id]}
	}
	run := func(label string, write func(o *order, s shipment) bool) (naturalRow, error) {
		table := newOrderTable(ids)
		var writes, rejected atomic.Int64
		b := &broker{workers: opts.Workers, clock: &clock{}, progress: opts.progress}
		opts.progress.row(label, len(msgs))
		bs, err := b.run(ctx, msgs, func(_ context.Context, m message) (verdict, error) {
			wrote, err := table.update(m.shipment.OrderID, func(o *order) bool { return write(o, m.shipment) })
			if err != nil {
				return 0, err
			}
			if wrote {
				writes.Add(1)
			} else {
				rejected.Add(1)
			}
			return ack, nil
		})
		if err != nil {
			return naturalRow{}, fmt.Errorf("%s: %w", label, err)
		}
		by := table.shipped()
		shipped := 0
		for _, n := range by {
			shipped += n
		}
		return naturalRow{
			Deliveries: bs.Copies, Orders: len(ids), Shipped: shipped,
			Writes: int(writes.Load()), Rejected: int(rejected.Load()),
			effects: countEffects(ids, by),
		}, nil
	}
	var res naturalResult
	var err error
	if res.Increment, err = run("increment on each delivery", func(o *order, s shipment) bool {
		o.shipped += s.Shipped // UPDATE SET shipped = shipped + :n
		o.status = orderShipped
		return true
	}); err != nil {
		return res, err
	}
	if res.Set, err = run("set the new state", func(o *order, s shipment) bool {
		o.shipped = s.Shipped // UPDATE SET shipped = :n, status = SHIPPED
		o.status = orderShipped
		return true
	}); err != nil {
		return res, err
	}
	res.Conditional, err = run("conditional state transition", func(o *order, s shipment) bool {
		if o.status != orderPaid { // ... IF status = PAID
			return false
		}
		o.shipped = s.Shipped
		o.status = orderShipped
		return true
	})
	return res, err
}

// chooseIDs returns exactly len(ids)/every of ids, chosen by seed; salt
// makes each experiment choose differently.
func chooseIDs(ids []string, every int, seed int64, salt uint64) map[string]bool {
	rng := rand.New(rand.NewPCG(uint64(seed), salt))
	chosen := make(map[string]bool, len(ids)/every)
	for _, i := range rng.Perm(len(ids))[:len(ids)/every] {
		chosen[ids[i]] = true
	}
	return chosen
}
