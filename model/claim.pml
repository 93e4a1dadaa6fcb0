/*
 * The claim protocol of docs/protocol.md as a Promela model, for SPIN.
 *
 * Workers receive the messages of an SQS queue (at-least-once: a message
 * comes back while it is not deleted, and a stray duplicate copy may come
 * even after the delete, until the queue's retention ends), claim each
 * message's key in a claim row with conditional writes, charge a payment
 * provider with the key as its idempotency key, complete the claim in a
 * transaction with a ledger entry, and delete the message. Faults: a worker
 * crashes at any step, an answer is lost after its write was applied, the
 * handler fails, a lease runs out under a slow holder (a stall), and the
 * workers' clocks are skewed.
 *
 * Time is relative: every stored instant is kept as "how long from now",
 * clamped at 0, so the state space is finite without a bound on the clock
 * and a liveness property can be checked. The workers' clocks differ by
 * SKEW: worker 1 reads the true time plus SKEW, the others read it exactly;
 * an instant a worker writes is its own reading, and a comparison a worker
 * makes is against its own reading.
 *
 * Properties, checked in every state the search reaches:
 *   P1 money      the provider moves money at most once per payment;
 *   P2 ledger     a ledger entry is applied at most once;
 *   P3 holder     only the current holder (the acq on the row) completes or releases;
 *   P4 retained   a completed claim is never overwritten while it is retained;
 *   P5 no orphan  a delivery is deferred only by a claim whose holder is
 *                 working on it or was stopped by a fault (crash, stall,
 *                 lost answer): never by one a failed holder left behind;
 *   P6 fencing    tokens only grow while the row exists;
 * and, with -DLIVE (pan -a -f, weak fairness), "live": with faults that
 * stop, every message is eventually completed and deleted.
 *
 * Mutants (each must yield a counterexample): -DMUT_NOACQ (Complete not
 * conditioned on acq), -DMUT_NOTOKEN (takeover not conditioned on the token
 * seen), -DMUT_NORELEASE (no Release on failure), -DMUT_NOLEASEEXPIRY (an
 * expired lease is never taken over); and parameters that break the
 * assumptions: RET below QR, SKEW above MARGIN.
 *
 * Parameters (every one can be set with -D on spin's command line;
 * model/check.sh sets them per configuration):
 */
#ifndef NW
#define NW 2          /* workers, 1..3 */
#endif
#ifndef NK
#define NK 1          /* keys (messages), 1..2 */
#endif
#ifndef CRASHES
#define CRASHES 1     /* worker crashes, in all */
#endif
#ifndef LOSTS
#define LOSTS 1       /* answers lost after the write applied, in all */
#endif
#ifndef FAILS
#define FAILS 1       /* handler failures (a retryable error), in all */
#endif
#ifndef STALLS
#define STALLS 1      /* leases run out under a holder still working, in all */
#endif
#ifndef DUPS
#define DUPS 1        /* stray duplicate copies of message 0 */
#endif
#ifndef RENEW
#define RENEW 1       /* a heartbeat renews the claim once per delivery */
#endif
#ifndef LEASE
#define LEASE 2       /* the claim's lease: visibility timeout minus the margin */
#endif
#ifndef MARGIN
#define MARGIN 1      /* the lease margin and the provider key-lifetime margin */
#endif
#ifndef SKEW
#define SKEW 1        /* how far worker 1's clock is ahead; assumed <= MARGIN */
#endif
#ifndef LIFE
#define LIFE 2        /* how long the provider honours an idempotency key */
#endif
#ifndef QR
#define QR 3          /* the queue's retention: how long a copy may come */
#endif
#ifndef RET
#define RET (QR + LEASE + MARGIN) /* the claim's retention: outlives a copy received at the end of QR */
#endif

#define VIS (LEASE + MARGIN) /* the visibility timeout */

/* an in-progress claim's lease is over by worker w's clock */
#ifdef MUT_NOLEASEEXPIRY
#define LEASE_OVER(k) (0)
#else
#define LEASE_OVER(k) (rlease[k] <= SK(w))
#endif
#define SK(w) ((w) == 1 -> SKEW : 0)

/* Arrays are sized for the largest configuration; unused keys start deleted. */
#define MK 2
#define MW 3

/* the claim row: status, token, acq, and instants as time from now */
#define ABSENT 0
#define IP 1    /* IN_PROGRESS */
#define DONE 2  /* COMPLETED */
#define REL 3   /* RELEASED */
byte st[MK];
byte tok[MK];
byte racq[MK];
byte rlease[MK];  /* lease_until */
byte rexp[MK];    /* expires_at */
byte rfa[MK];     /* first_at + key lifetime - margin: past the lifetime when <= the reader's skew */
bool orph[MK];    /* left in progress by a fault (crash, stall): a deferral may wait for it */

/* the queue */
bool gone[MK];    /* deleted */
byte vis[MK];     /* until visible again */
byte dups[MK];    /* stray copies left */
byte qlife[MK];   /* until the queue drops the stray copies */

/* the provider and the ledger */
byte money[MK];   /* charges made */
bool charged[MK]; /* a charge exists (what the lookup by payment id finds) */
byte pkey[MK];    /* until the provider forgets the key */
byte ledger[MK];  /* ledger entries applied */

/* the workers */
bool busy[MW];    /* holding a delivery */
byte hacq[MW];    /* the delivery's acq (0: none) */
byte wunt[MW];    /* until the worker's lease ends, by its own clock */

byte crashes = CRASHES;
byte losts = LOSTS;
byte fails = FAILS;
byte stalls = STALLS;

#define dec(x) if :: (x) > 0 -> x-- :: else fi

/* a worker whose lease the next tick would end, while it holds a delivery */
#define ENDS(w) ((w) < NW && busy[w] && wunt[w] == 1)
/* ... or whose lease has ended already */
#define ENDED(w) ((w) < NW && busy[w] && wunt[w] == 0)
#define STALL (ENDS(0) || ENDS(1) || ENDS(2) || ENDED(0) || ENDED(1) || ENDED(2))

/* the row's holder is working on it: a deferral waits for a live holder */
#define ACTIVE(a) ((busy[0] && hacq[0] == (a)) || (busy[1] && hacq[1] == (a)) || (busy[2] && hacq[2] == (a)))
#define INUSE(a) ((st[0] != ABSENT && racq[0] == (a)) || (st[1] != ABSENT && racq[1] == (a)) \
                  || hacq[0] == (a) || hacq[1] == (a) || hacq[2] == (a))

/* The clock and DynamoDB's TTL deletion. A tick ends a holder's lease only
 * as a stall (a fault with a budget): otherwise work fits in its lease. */
active proctype env() {
	byte i;
end_env:
	do
	:: d_step {
		(!STALL || stalls > 0) ->
		if
		:: STALL -> stalls--; printf("MSC: tick (a holder stalls past its lease)\n")
		:: else -> printf("MSC: tick\n")
		fi;
		i = 0;
		do
		:: i < MK ->
			dec(vis[i]); dec(rlease[i]); dec(rfa[i]); dec(pkey[i]);
#ifndef NOEXPIRY
			dec(rexp[i]); dec(qlife[i]);
			if
			:: qlife[i] == 0 -> gone[i] = 1 /* past the queue's retention: SQS drops it */
			:: else
			fi;
#endif
			i++
		:: else -> break
		od;
		i = 0;
		do
		:: i < MW -> dec(wunt[i]); i++
		:: else -> break
		od;
		i = 0
	   }
	:: atomic { st[0] != ABSENT && rexp[0] == 0 ->
		printf("MSC: TTL deletes row 0\n"); st[0] = ABSENT; tok[0] = 0; racq[0] = 0; rlease[0] = 0; rfa[0] = 0; orph[0] = 0 }
	:: atomic { st[1] != ABSENT && rexp[1] == 0 ->
		printf("MSC: TTL deletes row 1\n"); st[1] = ABSENT; tok[1] = 0; racq[1] = 0; rlease[1] = 0; rfa[1] = 0; orph[1] = 0 }
	od
}

/* The provider charges with the key: a key it still honours replays its charge. */
#define CHARGE(k) \
	if \
	:: pkey[k] > 0 \
	:: else -> money[k]++; charged[k] = 1; pkey[k] = LIFE; printf("MSC: provider charges key %d (charge %d)\n", k, money[k]); \
		assert(money[k] <= 1) /* P1 money: the provider moves money at most once per payment */ \
	fi

/* claimstore.Claim.Decide on the row a failed write returned (ALL_OLD), by
 * the worker's own clock, in the same atomic step as that write */
inline decide() {
	if
	:: racq[k] == a -> printf("MSC: w%d finds its own acq: acquired\n", w); goto held /* its own earlier write, unanswered */
	:: else ->
		if
		:: rexp[k] <= SK(w) -> seen = tok[k]; printf("MSC: w%d finds row past expires_at, token %d\n", w, seen); goto take /* past expires_at: counts as absent */
		:: rexp[k] > SK(w) && (st[k] == REL || (st[k] == IP && LEASE_OVER(k))) -> seen = tok[k]; printf("MSC: w%d finds row takeable (status %d), token %d\n", w, st[k], seen); goto take
		:: rexp[k] > SK(w) && st[k] == DONE -> printf("MSC: w%d finds COMPLETED: duplicate\n", w); goto duplicate
		:: rexp[k] > SK(w) && st[k] == IP && !LEASE_OVER(k) ->
			/* P5 no orphan: a key is held elsewhere only by a live holder or one a fault stopped */
			printf("MSC: w%d finds it held elsewhere (acq %d): defers\n", w, racq[k]);
			assert(orph[k] || ACTIVE(racq[k]));
			goto defer
		fi
	fi
}

/* the delivery starts: the worker holds it, with a new acq: the smallest id in use nowhere */
inline got() {
	busy[w] = 1; wunt[w] = LEASE;
	a = 1;
	do
	:: INUSE(a) -> a++
	:: else -> break
	od;
	hacq[w] = a;
	if
	:: dup -> printf("MSC: w%d receives a stray copy of message %d, acq %d\n", w, k, a)
	:: else -> printf("MSC: w%d receives message %d, acq %d\n", w, k, a)
	fi
}

/* A crash may come before any step: a branch of the step itself. */
#define CRASH :: crashes > 0 -> goto crash

/* the delivery is over: back to receiving */
#define IDLE busy[w] = 0; hacq[w] = 0; wunt[w] = 0; renewed = 0; tries = 0; seen = 0; k = 0; a = 0; dup = 0; goto end_idle

proctype worker(byte w) {
	byte k, a, seen, tries;
	bool dup, renewed;

end_idle:
	/* receive: a visible message (its visibility starts), or a stray copy */
	if
	:: atomic { !gone[0] && vis[0] == 0 -> k = 0; dup = 0; vis[0] = VIS; got() }
	:: atomic { 1 < NK && !gone[1] && vis[1] == 0 -> k = 1; dup = 0; vis[1] = VIS; got() }
	:: atomic { dups[0] > 0 && qlife[0] > 0 -> k = 0; dup = 1; dups[0]--; got() }
	fi;

acquire:
	/* PutItem, attribute_not_exists(pk), ALL_OLD on failure; Decide on the row returned */
	atomic {
		if
		CRASH;
		:: wunt[w] == 0 -> goto abandon /* past the lease: the call's deadline passed, nothing sent */
		:: wunt[w] > 0 && st[k] == ABSENT ->
			printf("MSC: w%d PutItem applied: token 1, acq %d\n", w, a);
			st[k] = IP; tok[k] = 1; racq[k] = a; orph[k] = 0;
			rlease[k] = wunt[w] + SK(w); rexp[k] = RET + SK(w); rfa[k] = LIFE - MARGIN + SK(w);
			if
			:: losts > 0 -> losts--; printf("MSC: answer lost\n"); goto acquire /* the answer is lost: retry with the same acq */
			:: true -> goto held
			fi
		:: wunt[w] > 0 && st[k] != ABSENT -> decide()
		fi
	}

take:
	/* UpdateItem: token = :seen AND (expired OR RELEASED OR IN_PROGRESS past its lease) */
	atomic {
		if
		CRASH;
		:: wunt[w] == 0 -> goto abandon /* past the lease: the call's deadline passed, nothing sent */
#ifdef MUT_NOTOKEN
		:: wunt[w] > 0 && st[k] != ABSENT &&
#else
		:: wunt[w] > 0 && st[k] != ABSENT && tok[k] == seen &&
#endif
		   (rexp[k] <= SK(w) || st[k] == REL || (st[k] == IP && LEASE_OVER(k))) ->
			assert(seen + 1 > tok[k]); /* P6 fencing: tokens only grow while the row exists */
			assert(st[k] != DONE || rexp[k] <= MARGIN); /* P4 a completed claim is never overwritten while retained */
			if
			:: rexp[k] <= SK(w) -> rfa[k] = LIFE - MARGIN + SK(w) /* an expired row counts as absent */
			:: else
			fi;
			printf("MSC: w%d takes over: token %d, acq %d\n", w, seen + 1, a);
			st[k] = IP; tok[k] = seen + 1; racq[k] = a; orph[k] = 0;
			rlease[k] = wunt[w] + SK(w); rexp[k] = RET + SK(w);
			seen = 0; tries = 0;
			if
			:: losts > 0 -> losts--; printf("MSC: answer lost\n"); goto acquire
			:: true -> goto held
			fi
		:: wunt[w] > 0 && st[k] == ABSENT -> goto acquire /* condition failed without a row: unknown, retried */
		:: else ->
			tries++;
			if
			:: tries >= 3 -> goto defer /* still contended: held elsewhere */
			:: else -> decide()
			fi
		fi
	}

held:
	/* the handler runs under Hold: a heartbeat may renew; the payment
	 * handler looks the charge up first when past the provider's key
	 * lifetime (by first_at), then charges with the key */
	atomic {
		if
		CRASH;
		:: wunt[w] == 0 -> goto lost /* the handler's context ended with the lease */
		:: wunt[w] > 0 && RENEW && !renewed ->
			/* one heartbeat: Renew extends the lease and the visibility together */
			renewed = 1;
			if
			:: racq[k] == a && st[k] == IP ->
				printf("MSC: w%d renews its lease\n", w);
				rlease[k] = LEASE + SK(w); rexp[k] = RET + SK(w); wunt[w] = LEASE;
				if :: !gone[k] && !dup -> vis[k] = VIS :: else fi;
				goto held
			:: else -> goto lost /* ErrLeaseLost: the handler's context is cancelled */
			fi
		:: wunt[w] > 0 && fails > 0 ->
			fails--; printf("MSC: w%d handler fails\n", w); goto failed
		:: wunt[w] > 0 ->
			if
			:: rfa[k] <= SK(w) && charged[k] -> printf("MSC: w%d past the key lifetime: lookup finds the charge\n", w)
			:: else -> CHARGE(k)
			fi;
			if
			:: fails > 0 -> fails--; printf("MSC: w%d handler fails after the charge\n", w); goto failed /* its answer lost: a retryable error */
			:: true -> renewed = 1; goto complete
			fi
		fi
	}

complete:
	/* transactional completion: acq = :mine AND status = IN_PROGRESS, with the
	 * ledger entry. Its first try is sent even if the lease has ended since
	 * the handler returned: Hold checked the lease, Complete does not. */
	atomic {
		if
		CRASH;
#ifdef MUT_NOACQ
		:: st[k] == IP ->
#else
		:: racq[k] == a && st[k] == IP ->
#endif
			assert(racq[k] == a); /* P3 holder: only the current holder completes */
			printf("MSC: w%d completes (acq %d on the row), ledger entry applied\n", w, racq[k]);
			st[k] = DONE; rexp[k] = RET + SK(w); orph[k] = 0;
			ledger[k]++;
			assert(ledger[k] <= 1); /* P2 ledger: an entry is applied at most once */
			if
			:: losts > 0 -> losts--; printf("MSC: answer lost\n"); goto retrycomplete
			:: true -> goto ack
			fi
		:: racq[k] == a && st[k] == DONE -> goto ack /* its own earlier try, applied */
		:: st[k] == ABSENT -> goto leave /* unknown: leave the message to redeliver */
		:: else -> goto leave /* ErrLeaseLost: a later holder owns the key */
		fi
	}

retrycomplete:
	/* the retry of a Complete whose answer was lost (the lease is not checked again) */
	atomic {
		if
		CRASH;
		:: racq[k] == a && st[k] == DONE -> goto ack /* its own earlier try, applied */
		:: else -> goto leave
		fi
	}

ack:
	atomic {
		if
		CRASH;
		:: true -> printf("MSC: w%d deletes message %d\n", w, k); gone[k] = 1; IDLE /* DeleteMessage */
		fi
	}

duplicate:
	atomic { printf("MSC: w%d deletes message %d\n", w, k); gone[k] = 1; IDLE }

failed:
#ifndef MUT_NORELEASE
	/* Release: acq = :mine AND status = IN_PROGRESS */
	atomic {
		if
		CRASH;
		:: racq[k] == a && st[k] == IP ->
			assert(racq[k] == a); /* P3 holder: only the current holder releases */
			printf("MSC: w%d releases\n", w);
			st[k] = REL;
			if
			:: losts > 0 -> losts--; printf("MSC: answer lost\n"); goto failed /* the answer is lost: retried */
			:: true -> goto retry
			fi
		:: racq[k] == a && st[k] == REL -> goto retry /* its own earlier try, applied */
		:: else -> goto leave /* ErrLeaseLost */
		fi
	}
#endif

retry:
	/* the message comes back (the backoff is abstracted away) */
	atomic { if :: !gone[k] && !dup -> vis[k] = 0 :: else fi; printf("MSC: w%d returns message %d\n", w, k); IDLE }

defer:
	/* visible again when the holder's lease ends, by this worker's clock, plus a second */
	atomic {
		if
		:: !gone[k] && !dup ->
			if
			:: rlease[k] > SK(w) -> vis[k] = rlease[k] - SK(w) + 1
			:: else -> vis[k] = 1
			fi
		:: else
		fi;
		IDLE
	}

lost:
	/* the lease ran out or was taken: neither complete nor ack */
	atomic { if :: st[k] == IP && racq[k] == a -> orph[k] = 1 :: else fi; printf("MSC: w%d lost its lease\n", w); IDLE }

abandon:
	/* an Acquire whose answer was lost may have applied: the claim stays until its lease ends */
	atomic { if :: st[k] == IP && racq[k] == a -> orph[k] = 1 :: else fi; goto retry }

leave:
	atomic { printf("MSC: w%d leaves message %d\n", w, k); IDLE }

crash:
	/* the process dies; its delivery stays invisible until the visibility ends */
	atomic {
		crashes--;
		printf("MSC: w%d crashes\n", w);
		if :: st[k] == IP && racq[k] == a -> orph[k] = 1 :: else fi;
		IDLE
	}
}

init {
	atomic {
		byte i = 0;
		do
		:: i < MK ->
			gone[i] = (i >= NK);
			qlife[i] = QR;
			i++
		:: else -> break
		od;
		dups[0] = DUPS;
		i = 0;
		do
		:: i < NW -> run worker(i); i++
		:: else -> break
		od
	}
}

/* Liveness: with faults that stop, every message is eventually completed and deleted. */
#ifdef LIVE
#define ALLGONE (gone[0] && gone[1])
ltl live { <> ALLGONE }
#endif
