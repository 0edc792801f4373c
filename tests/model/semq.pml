/* SPDX-License-Identifier: MIT */
/*
 * semq.pml — a Promela model of SEMQ's exactly-once handshake (SPEC §3-§7),
 * checked with Spin by tests/model/check.sh. Three nodes in line: an origin
 * O, a store-and-forward relay R and a receiver D (O - R - D), and one
 * stream O->D of NSEQ messages of one key (seq s has prev_seq s-1). What
 * each node does is what node/proto.c and node/store.c do; README.md beside
 * this file says what is abstracted, and why.
 *
 * DESIGN
 *  - Durable state (O's tb_0031 status, R's copy, D's tb_0030 row with its
 *    confirm bits, the watermark wm and the business effect eff) survives
 *    crashes. Volatile state (D's held messages, frames in flight) does not.
 *  - One d_step is one committed batch of the worker: a frame is taken, the
 *    tables change, the proto_tick() of the same batch runs (rows in status
 *    0 are sent, held messages whose predecessor is in are recorded, the
 *    watermark advances) and the answers are queued, all at once. An answer
 *    never leaves before the commit that makes it true
 *    (BROKEN_ACK_BEFORE_COMMIT breaks exactly that). A crash before a commit
 *    is the loss of the frame being handled.
 *  - Each direction of a connection is a FIFO queue (TCP). Faults come from
 *    bounded budgets: LOSS frames lost, DUPS frames duplicated, REORDER
 *    frames overtaken by the next one, DROPS connections cut, CRASHES node
 *    crashes (R: both its connections; D: its connection and its held
 *    messages). A cut or a crash loses every frame on the connection; a
 *    connection comes back (not budgeted) and both ends run PEER_UP.
 *  - Timers (query_after) fire when nothing is in flight, all at once: O
 *    queries its rows in 4/6, R its copies in 4, D repeats the indication of
 *    AS_INIT rows and drops held messages. EARLY extra queries of O may come
 *    at any moment: the race of a query against frames still on their way.
 *  - eff[s] counts how often message s took effect. Safety: eff[s] <= 1 in
 *    every state, with key order, and no confirmation (100) or compaction
 *    (s <= wm) without the effect. Liveness under weak fairness: every
 *    message takes effect, every origin row reaches 100, the watermark
 *    covers the stream, the relay's copies are gone.
 *
 * Variants (spin -D...): NSEQ (1-3), QLEN, the budgets; COVER (the cover
 * checks); BROKEN_NO_WATERMARK_CHECK, BROKEN_ACK_BEFORE_COMMIT,
 * BROKEN_BLIND_RESEND, BROKEN_RELAY_NO_RESEND (designs that must fail, or
 * show what does not matter).
 */

#ifndef NSEQ
#define NSEQ 2
#endif
/* Frames one direction of a connection holds. More is an assertion
 * failure (raise QLEN), never a silent loss. */
#ifndef QLEN
#define QLEN 12
#endif
/* Fault budgets (also settable when pan runs, see init at the end). */
#ifndef LOSS
#define LOSS 0
#endif
#ifndef DUPS
#define DUPS 0
#endif
#ifndef REORDER
#define REORDER 0
#endif
#ifndef DROPS
#define DROPS 0
#endif
#ifndef CRASHES
#define CRASHES 0
#endif
#ifndef EARLY
#define EARLY 0
#endif

/* tb_0031 status on the origin (SPEC §4) */
#define SS_UNSEND 0
#define SS_SEND 4
#define SS_ACK 6
#define SS_ACK2 100
#define IN_DOUBT(x) (ost[x] == SS_SEND || ost[x] == SS_ACK)

/* the relay's store-and-forward copy: a tb_0031 row of another origin */
#define CP_NONE 0
#define CP_UNSEND 1 /* status 0 */
#define CP_SEND 2   /* status 4 */

/* the receiver's tb_0030 row; RX_NONE with seq <= wm is compacted */
#define RX_NONE 0
#define RX_INIT 1 /* AS_INIT */
#define RX_OK 2   /* AS_OK */

#define CONFIRM_ORIGIN 1
#define CONFIRM_RELAY 2
#define HELD_STALE 4 /* the connection a held copy came on is gone */

#define PREV(s) ((s) - 1) /* prev_seq: one key */

/* Frames: kind * 4 + seq. */
#define F_DATA 1   /* Data, stored_by empty */
#define F_DATAS 2  /* Data from R's copy, stored_by = R */
#define F_QUERY 3  /* Query */
#define F_RESPO 4  /* 810-Response from O */
#define F_RESPR 5  /* 810-Response from R */
#define F_IND 6    /* 810-Indication */
#define F_QR0 7    /* QueryReply: not received */
#define F_QR1 8    /* QueryReply: received */
#define F_RACK 9   /* RelayAck (forwarded, stored, custody) */
#define FRAME(k, s) ((k) * 4 + (s))
/* The kinds' names for trails (printf %e): Spin numbers mtypes from the
 * last one declared (1) up, so this list runs from F_RACK down to F_DATA. */
mtype = {
	RelayAck, ReplyReceived, ReplyNotReceived, Indication810,
	Response810FromR, Response810FromO, Query, DataCopy, Data
};

#if NSEQ == 1
#define EACH(M) M(1)
#define ALL(P) (P(1))
#define ANY(P) (P(1))
#elif NSEQ == 2
#define EACH(M) M(1) M(2)
#define ALL(P) (P(1) && P(2))
#define ANY(P) (P(1) || P(2))
#elif NSEQ == 3
#define EACH(M) M(1) M(2) M(3)
#define ALL(P) (P(1) && P(2) && P(3))
#define ANY(P) (P(1) || P(2) || P(3))
#else
#error "NSEQ must be 1, 2 or 3"
#endif

/* ---- durable state ------------------------------------------------------ */

byte ost[NSEQ + 1];  /* O: tb_0031 status of seq s */
byte cp[NSEQ + 1];   /* R: its copy of s */
byte rx[NSEQ + 1];   /* D: tb_0030 row of s */
byte need[NSEQ + 1]; /* D: confirm_need of the row */
byte got[NSEQ + 1];  /* D: confirm_got of the row */
byte wm;             /* D: confirmed_through of the stream */
byte eff[NSEQ + 1];  /* D: times s took effect (business tables) */

/* ---- volatile state ----------------------------------------------------- */

byte held[NSEQ + 1]; /* D: held for its predecessor: need | HELD_STALE */
#ifdef BROKEN_ACK_BEFORE_COMMIT
byte pend[NSEQ + 1]; /* D: indicated, not yet committed: its need */
#endif
bool up_or, up_rd; /* connections O-R and R-D */

/* One FIFO per direction: q_xy holds what x sent to y, n_xy frames. */
byte q_or[QLEN], q_ro[QLEN], q_rd[QLEN], q_dr[QLEN];
byte n_or, n_ro, n_rd, n_dr;

/* fault budgets */
byte losses = LOSS, dups = DUPS, reorders = REORDER, drops = DROPS;
byte crashes = CRASHES, early = EARLY;

#ifdef COVER
/* ghosts for the cover checks, compiled in only for them */
bool saw_late_dup; /* a Data with seq <= wm reached D */
bool saw_held;     /* D held a message for its predecessor */
bool saw_copy;     /* D got a Data from R's stored copy */
#define GHOST(x) x = 1
#else
#define GHOST(x) skip
#endif

/* scratch inside one d_step (never part of the state) */
hidden byte i, j, f, s;

/* ---- queues ------------------------------------------------------------- */

#define PUSH(q, n, fr)                                                         \
	assert(n < QLEN); /* QLEN too small for this configuration */         \
	q[n] = fr;                                                             \
	n++
#define POP(q, n)                                                              \
	f = q[0];                                                              \
	i = 1;                                                                 \
	do                                                                     \
	:: i < n -> q[i - 1] = q[i]; i++                                       \
	:: else -> break                                                       \
	od;                                                                    \
	n--;                                                                   \
	q[n] = 0;                                                              \
	s = f % 4;                                                             \
	i = 0
#define CLEAR(q, n)                                                            \
	i = 0;                                                                 \
	do                                                                     \
	:: i < n -> q[i] = 0; i++                                              \
	:: else -> break                                                       \
	od;                                                                    \
	n = 0;                                                                 \
	i = 0
#define KIND (f / 4)

#define QUIET_NET (n_or + n_ro + n_rd + n_dr == 0)
#ifdef BROKEN_ACK_BEFORE_COMMIT
#define PENDING(x) (pend[x] != 0)
#define QUIET (QUIET_NET && !ANY(PENDING))
#else
#define QUIET QUIET_NET
#endif

/* ---- the properties ----------------------------------------------------- */

/* Safety, in every state: at most one effect; key order; a confirmed
 * origin row (100) and a seq at or below the watermark have taken effect. */
#define INV(x)                                                                 \
	(eff[x] <= 1 &&                                                        \
	 (PREV(x) == 0 || eff[x] == 0 || eff[PREV(x)] == 1) &&                \
	 (ost[x] != SS_ACK2 || eff[x] == 1) && ((x) > wm || eff[x] == 1))
#define EFFECT(x) (eff[x] == 1)
#define CONFIRMED(x) (ost[x] == SS_ACK2)
#define NOCOPY(x) (cp[x] == CP_NONE)

/* Checked in every state (pan -N invariant). */
ltl invariant { [] ALL(INV) }

/* Liveness, under weak fairness (pan -a -f): the fault budgets are finite
 * and connections come back, so these must hold on every fair run. */
ltl delivered { <> ALL(EFFECT) }
ltl confirmed { <> ALL(CONFIRMED) }
ltl compacted { <> (wm == NSEQ) }
ltl relay_drained { <> [] ALL(NOCOPY) }
#ifdef COVER
/* Cover checks: each must be violated, i.e. the situation is reachable. */
ltl cover_late_dup { [] !saw_late_dup }
ltl cover_held { [] !saw_held }
ltl cover_copy { [] !saw_copy }
#endif


/* ---- origin O (node/proto.c: send_pending, on_relay_ack, on_indication,
 *      on_query_reply, query_in_doubt, on_peer_up) ------------------------ */

/* the tick's send_pending: every row in status 0 goes out, 0 -> 4 */
inline o_tick()
{
	if
	:: up_or ->
		j = 1;
		do
		:: j <= NSEQ ->
			if
			:: ost[j] == SS_UNSEND ->
				ost[j] = SS_SEND;
				PUSH(q_or, n_or, FRAME(F_DATA, j));
				printf("O: Data %d, status 4\n", j)
			:: else -> skip
			fi;
			j++
		:: else -> break
		od;
		j = 0
	:: else -> skip
	fi
}

#ifdef BROKEN_BLIND_RESEND
/* an in-doubt row is sent again without asking first */
#define O_TIMER(x) ost[x] = SS_UNSEND; printf("O: %d blindly resent\n", x)
#define O_TIMER_END o_tick()
#else
#define O_TIMER(x)                                                             \
	PUSH(q_or, n_or, FRAME(F_QUERY, x));                                   \
	printf("O: query %d\n", x)
#define O_TIMER_END skip
#endif

inline o_confirm()
{
	/* store_mark_confirmed: 0/4/6 -> 100 (declined when 100); an
	 * 810-Response either way */
	ost[s] = SS_ACK2;
	PUSH(q_or, n_or, FRAME(F_RESPO, s));
	printf("O: %d confirmed, status 100; 810-Response\n", s)
}

inline o_frame()
{
	if
	:: KIND == F_RACK ->
		/* RelayAck forwarded / stored, or R's custody: 4 -> 6 */
		if
		:: ost[s] == SS_SEND -> ost[s] = SS_ACK
		:: else -> skip
		fi;
		printf("O: RelayAck %d, status %d\n", s, ost[s])
	:: KIND == F_IND -> printf("O: 810-Indication %d\n", s); o_confirm()
	:: KIND == F_QR1 -> printf("O: reply: %d received\n", s); o_confirm()
	:: KIND == F_QR0 ->
		printf("O: reply: %d not received\n", s);
		/* 4/6 -> 0, sent again by the tick */
		if
		:: IN_DOUBT(s) -> ost[s] = SS_UNSEND
		:: else -> skip
		fi;
		o_tick()
	:: else -> assert(false)
	fi
}

#define O_EARLY(x)                                                             \
	:: d_step { early > 0 && !QUIET && up_or && IN_DOUBT(x) -> early--;   \
		printf("O: early timer (a query races frames in flight)\n");   \
		O_TIMER(x); O_TIMER_END }

proctype Origin()
{
end:
	do
	:: d_step { n_ro > 0 -> POP(q_ro, n_ro); o_frame() }
	EACH(O_EARLY)
	od
}

/* ---- relay R, store_and_forward = yes (relay_one, on_indication,
 *      on_response, on_query, on_query_reply with answer_for_copy,
 *      send_pending and query_in_doubt for its copies) ------------------- */

/* what R does with a frame to pass on to O: dropped when O is away */
#define TO_O(k)                                                                \
	if                                                                     \
	:: up_or -> PUSH(q_ro, n_ro, FRAME(k, s))                              \
	:: else -> skip                                                        \
	fi
#define TO_D(k)                                                                \
	if                                                                     \
	:: up_rd -> PUSH(q_rd, n_rd, FRAME(k, s))                              \
	:: else -> skip                                                        \
	fi

inline r_from_o()
{
	if
	:: KIND == F_DATA ->
		if
		:: up_rd -> PUSH(q_rd, n_rd, FRAME(F_DATA, s));
			printf("R: Data %d forwarded\n", s)
		:: else -> /* a second copy is a duplicate: kept as is */
			if
			:: cp[s] == CP_NONE -> cp[s] = CP_UNSEND
			:: else -> skip
			fi;
			printf("R: Data %d stored, copy %d\n", s, cp[s])
		fi;
		PUSH(q_ro, n_ro, FRAME(F_RACK, s))
	:: KIND == F_QUERY -> TO_D(F_QUERY)
	:: KIND == F_RESPO -> TO_D(F_RESPO)
	:: else -> assert(false)
	fi
}

inline r_from_d()
{
	if
	:: KIND == F_IND ->
		cp[s] = CP_NONE; /* store_drop_copy */
		printf("R: 810-Indication %d: copy dropped, 810-Response\n", s);
		PUSH(q_rd, n_rd, FRAME(F_RESPR, s));
		TO_O(F_IND)
	/* on_query_reply, answer_for_copy: an answer about a copy R holds
	 * answers R's own query first */
#ifndef BROKEN_RELAY_NO_RESEND
	:: KIND == F_QR1 && cp[s] != CP_NONE ->
		/* the destination has it: the copy is done, R confirms */
		cp[s] = CP_NONE;
		printf("R: %d received: copy dropped, 810-Response\n", s);
		PUSH(q_rd, n_rd, FRAME(F_RESPR, s));
		TO_O(F_QR1)
	:: KIND == F_QR0 && cp[s] != CP_NONE ->
		/* a copy R had sent goes out again (4 -> 0, the tick sends
		 * it); O hears custody instead of "not received" */
		printf("R: %d not received, copy held: custody\n", s);
		if
		:: cp[s] == CP_SEND ->
			if
			:: up_rd -> PUSH(q_rd, n_rd, FRAME(F_DATAS, s));
				printf("R: copy %d sent again\n", s)
			:: else -> cp[s] = CP_UNSEND
			fi
		:: else -> skip
		fi;
		TO_O(F_RACK)
#else
	/* before f3e1eeb: custody, and the copy is never sent again */
	:: KIND == F_QR1 && cp[s] != CP_NONE -> TO_O(F_QR1)
	:: KIND == F_QR0 && cp[s] != CP_NONE ->
		printf("R: %d not received, copy held: custody\n", s);
		TO_O(F_RACK)
#endif
	:: KIND == F_QR1 && cp[s] == CP_NONE -> TO_O(F_QR1)
	:: KIND == F_QR0 && cp[s] == CP_NONE -> TO_O(F_QR0)
	:: else -> assert(false)
	fi
}

proctype Relay()
{
end:
	do
	:: d_step { n_or > 0 -> POP(q_or, n_or); r_from_o() }
	:: d_step { n_dr > 0 -> POP(q_dr, n_dr); r_from_d() }
	od
}

/* ---- receiver D (store_receive, retry_held in the tick, on_response with
 *      the watermark advance of the same batch, on_query, repeat_unacked) - */

#ifdef BROKEN_NO_WATERMARK_CHECK
#define SEEN(x) (rx[x] != RX_NONE) /* forgets the compacted ids */
#else
#define SEEN(x) ((x) <= wm || rx[x] != RX_NONE)
#endif
#define RECEIVED(x) ((x) <= wm || rx[x] != RX_NONE) /* lookup_received */
#define PRED_IN(x) (PREV(x) == 0 || PREV(x) <= wm || rx[PREV(x)] != RX_NONE)

inline d_record(x, nd)
{
	/* tb_0030 row and the plugin's effect, one transaction */
	assert(x > wm); /* a compacted id is never taken for a new one */
	rx[x] = RX_INIT;
	need[x] = nd;
	got[x] = 0;
	eff[x]++;
	printf("D: %d recorded and applied (need %d)\n", x, nd)
}

/* retry_held: held messages whose predecessor is in are recorded now; the
 * indication goes to the connection the copy came on (lost if gone) */
inline d_tick()
{
	j = 1;
	do
	:: j <= NSEQ ->
		if
		:: held[j] != 0 && PRED_IN(j) ->
			if
			:: SEEN(j) -> skip
			:: else -> d_record(j, held[j] & 3)
			fi;
			if
			:: up_rd && !(held[j] & HELD_STALE) ->
				PUSH(q_dr, n_dr, FRAME(F_IND, j))
			:: else -> skip
			fi;
			held[j] = 0;
			j = 1
		:: else -> j++
		fi
	:: else -> break
	od;
	j = 0
}

#ifdef BROKEN_ACK_BEFORE_COMMIT
/* the indication leaves first, the commit comes in a later step */
#define D_NEW(nd)                                                              \
	pend[s] = nd;                                                          \
	PUSH(q_dr, n_dr, FRAME(F_IND, s));                                     \
	printf("D: %d indicated, not yet committed\n", s)
#else
#define D_NEW(nd) d_record(s, nd); PUSH(q_dr, n_dr, FRAME(F_IND, s)); d_tick()
#endif

inline d_receive(nd)
{
#ifdef COVER
	if
	:: s <= wm -> saw_late_dup = 1
	:: else -> skip
	fi;
#endif
	if
	:: SEEN(s) -> PUSH(q_dr, n_dr, FRAME(F_IND, s)); /* duplicate */
		printf("D: %d duplicate (wm %d)\n", s, wm)
	:: !SEEN(s) && PRED_IN(s) -> D_NEW(nd)
	:: !SEEN(s) && !PRED_IN(s) ->
		/* held in memory until its predecessor is recorded */
		GHOST(saw_held);
		if
		:: held[s] == 0 -> held[s] = nd
		:: else -> skip
		fi;
		printf("D: %d held\n", s)
	fi
}

inline d_response(cbit)
{
	if
	:: rx[s] != RX_NONE ->
		got[s] = got[s] | cbit;
		if
		:: (got[s] & need[s]) == need[s] -> rx[s] = RX_OK
		:: else -> skip
		fi;
		/* store_advance_watermarks in the tick of the same batch:
		 * over the run of AS_OK rows above wm, compacting them */
		do
		:: wm < NSEQ && rx[wm + 1] == RX_OK ->
			wm++;
			rx[wm] = RX_NONE;
			need[wm] = 0;
			got[wm] = 0
		:: else -> break
		od;
		printf("D: 810-Response %d (bit %d): row %d, wm %d\n", s, cbit,
		       rx[s], wm)
	:: else -> skip /* compacted: declined */
	fi
}

inline d_frame()
{
	if
	:: KIND == F_DATA -> d_receive(CONFIRM_ORIGIN)
	:: KIND == F_DATAS -> GHOST(saw_copy);
		d_receive(CONFIRM_ORIGIN | CONFIRM_RELAY)
	:: KIND == F_RESPO -> d_response(CONFIRM_ORIGIN)
	:: KIND == F_RESPR -> d_response(CONFIRM_RELAY)
	:: KIND == F_QUERY ->
		if
		:: RECEIVED(s) -> PUSH(q_dr, n_dr, FRAME(F_QR1, s))
		:: else -> PUSH(q_dr, n_dr, FRAME(F_QR0, s))
		fi;
		printf("D: query %d: received %d\n", s, RECEIVED(s))
	:: else -> assert(false)
	fi
}

#ifdef BROKEN_ACK_BEFORE_COMMIT
#define D_COMMIT(x)                                                            \
	:: d_step { pend[x] != 0 -> d_record(x, pend[x]); pend[x] = 0;         \
		d_tick() }
#else
#define D_COMMIT(x)
#endif

proctype Receiver()
{
end:
	do
	:: d_step { n_rd > 0 -> POP(q_rd, n_rd); d_frame() }
	EACH(D_COMMIT)
	od
}

/* ---- the clock: query_after has passed ---------------------------------- */

/* Due timers fire when nothing is in flight, all in one step: O's
 * query_in_doubt, R's for its copies, D's repeat_unacked and retry_held
 * dropping what waited too long. The frames they send are still taken in
 * any interleaving; one step for all keeps one node's timer from starving
 * the others'. */
#define O_DUE(x) (up_or && IN_DOUBT(x))
#define R_DUE(x) (up_rd && cp[x] == CP_SEND)
#define D_DUE(x) (held[x] != 0 || (up_rd && rx[x] == RX_INIT))
#define DUE(x) (O_DUE(x) || R_DUE(x) || D_DUE(x))

inline tick()
{
	printf("CLOCK: query_after\n");
	s = 1;
	do
	:: s <= NSEQ ->
		if
		:: O_DUE(s) -> O_TIMER(s)
		:: else -> skip
		fi;
		if
		:: R_DUE(s) -> PUSH(q_rd, n_rd, FRAME(F_QUERY, s));
			printf("R: query copy %d\n", s)
		:: else -> skip
		fi;
		if
		:: held[s] != 0 -> held[s] = 0; printf("D: held %d dropped\n", s)
		:: else -> skip
		fi;
		if
		:: up_rd && rx[s] == RX_INIT -> PUSH(q_dr, n_dr, FRAME(F_IND, s));
			printf("D: repeat 810-Indication %d\n", s)
		:: else -> skip
		fi;
		s++
	:: else -> break
	od;
	O_TIMER_END
}

proctype Clock()
{
end:
	do
	:: d_step { QUIET && ANY(DUE) -> tick() }
	od
}

/* ---- environment: connections, crashes, loss, duplication, reordering --- */

inline down_or()
{
	CLEAR(q_or, n_or);
	CLEAR(q_ro, n_ro);
	up_or = 0
}

inline down_rd()
{
	CLEAR(q_rd, n_rd);
	CLEAR(q_dr, n_dr);
	up_rd = 0;
	j = 1;
	do
	:: j <= NSEQ ->
		if
		:: held[j] != 0 -> held[j] = held[j] | HELD_STALE
		:: else -> skip
		fi;
		j++
	:: else -> break
	od;
	j = 0
}

/* PEER_UP on both ends of O-R: O queries every row in 4/6 and its tick
 * sends the rows in 0. */
inline up_o_r()
{
	up_or = 1;
	printf("ENV: O-R up\n");
	s = 1;
	do
	:: s <= NSEQ ->
		if
		:: IN_DOUBT(s) -> PUSH(q_or, n_or, FRAME(F_QUERY, s))
		:: else -> skip
		fi;
		s++
	:: else -> break
	od;
	o_tick()
}

/* PEER_UP on both ends of R-D: R queries its copies in 4 and its tick sends
 * those in 0; D repeats the indication of every AS_INIT row. */
inline up_r_d()
{
	up_rd = 1;
	printf("ENV: R-D up\n");
	s = 1;
	do
	:: s <= NSEQ ->
		if
		:: cp[s] == CP_SEND -> PUSH(q_rd, n_rd, FRAME(F_QUERY, s))
		:: else -> skip
		fi;
		if
		:: rx[s] == RX_INIT -> PUSH(q_dr, n_dr, FRAME(F_IND, s))
		:: else -> skip
		fi;
		s++
	:: else -> break
	od;
	s = 1;
	do
	:: s <= NSEQ ->
		if
		:: cp[s] == CP_UNSEND -> cp[s] = CP_SEND;
			PUSH(q_rd, n_rd, FRAME(F_DATAS, s));
			printf("R: copy %d sent, status 4\n", s)
		:: else -> skip
		fi;
		s++
	:: else -> break
	od;
	s = 0
}

inline d_lose_volatile()
{
	j = 1;
	do
	:: j <= NSEQ ->
		held[j] = 0;
#ifdef BROKEN_ACK_BEFORE_COMMIT
		pend[j] = 0;
#endif
		j++
	:: else -> break
	od;
	j = 0
}

/* Reordering: the frame at the head is overtaken by the k behind it. */
#define DELAY(q, n, k)                                                         \
	:: d_step { reorders > 0 && n > k -> reorders--;                       \
		f = q[0];                                                      \
		i = 0;                                                         \
		do                                                             \
		:: i < k -> q[i] = q[i + 1]; i++                               \
		:: else -> break                                               \
		od;                                                            \
		q[k] = f;                                                      \
		i = 0;                                                         \
		printf("ENV: %e %d overtaken by %d frames\n", f / 4, f % 4, k) }

/* Faults on the frame at the head of a queue (any frame gets there). */
#define FAULTS(q, n)                                                           \
	:: d_step { losses > 0 && n > 0 -> losses--; POP(q, n);                \
		printf("ENV: lost %e %d\n", f / 4, f % 4) }                    \
	:: d_step { dups > 0 && n > 0 && n < QLEN -> dups--;                   \
		i = n;                                                         \
		do                                                             \
		:: i > 1 -> q[i] = q[i - 1]; i--                               \
		:: else -> break                                               \
		od;                                                            \
		q[1] = q[0];                                                   \
		n++;                                                           \
		i = 0;                                                         \
		printf("ENV: duplicated %e %d\n", q[0] / 4, q[0] % 4) }        \
	DELAY(q, n, 1) DELAY(q, n, 2) DELAY(q, n, 3)

proctype Env()
{
end:
	do
	:: d_step { !up_or -> up_o_r() }
	:: d_step { !up_rd -> up_r_d() }
	:: d_step { up_or && drops > 0 -> drops--; down_or();
		printf("ENV: O-R cut\n") }
	:: d_step { up_rd && drops > 0 -> drops--; down_rd();
		printf("ENV: R-D cut\n") }
	:: d_step { crashes > 0 -> crashes--; down_or(); down_rd();
		printf("ENV: R crashed\n") }
	:: d_step { crashes > 0 -> crashes--; down_rd(); d_lose_volatile();
		printf("ENV: D crashed\n") }
	FAULTS(q_or, n_or)
	FAULTS(q_ro, n_ro)
	FAULTS(q_rd, n_rd)
	FAULTS(q_dr, n_dr)
	od
}

/* ---- start ------------------------------------------------------------- */

/*
 * The fault budgets are the macros above, or what SEMQ_LOSS, SEMQ_DUPS,
 * SEMQ_REORDER, SEMQ_DROPS, SEMQ_CRASHES and SEMQ_EARLY say when pan runs
 * (so that one compiled verifier serves every budget; a replay with spin -t
 * needs the same values as -D macros). Then the nodes start.
 */
init
{
	c_code {
		char *e;
		if ((e = getenv("SEMQ_LOSS")) != NULL) now.losses = atoi(e);
		if ((e = getenv("SEMQ_DUPS")) != NULL) now.dups = atoi(e);
		if ((e = getenv("SEMQ_REORDER")) != NULL) now.reorders = atoi(e);
		if ((e = getenv("SEMQ_DROPS")) != NULL) now.drops = atoi(e);
		if ((e = getenv("SEMQ_CRASHES")) != NULL) now.crashes = atoi(e);
		if ((e = getenv("SEMQ_EARLY")) != NULL) now.early = atoi(e);
	};
	atomic {
		run Origin();
		run Relay();
		run Receiver();
		run Clock();
		run Env()
	}
}
