/* SPDX-License-Identifier: MIT */
/*
 * semq.pml — a Promela model of SEMQ's exactly-once handshake (SPEC §3-§7),
 * checked with Spin by tests/model/check.sh. Three nodes in line: an origin
 * O, a store-and-forward relay R and a receiver D (O - R - D), and one
 * stream O->D of NSEQ messages of one key (seq s has prev_seq s-1). What
 * each node does is what node/proto.c and node/store_*.c do; README.md
 * beside this file says what is abstracted, and why.
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
 * LIVES (spin -DLIVES; docs/PROTOCOL.md "Lives of a node"): wire revision 2
 * with digests. Without it the model is a stream whose digests are unknown
 * (a revision-1 origin): rows are compacted as the watermark passes them
 * and a copy at or below it is a duplicate, as in SEMQ 0.1. With it:
 *  - a message is a content c (1..NC, its digest; each enqueued message a
 *    new one) sent as (life, seq, c, prev_seq); prevc[c] is the content of
 *    its key predecessor, so prev_digest is the digest of prevc[c];
 *  - the application enqueues messages (ENQ steps: counter + 1, a new
 *    content, the key's last row as predecessor); two more events of O:
 *    RESTORES (a snapshot of O's durable state taken at some moment is put
 *    back at a later one: statuses, contents, counter; same life) and
 *    REIMAGES (O's database wiped: a new life, counter 0, no rows); either
 *    cuts O-R (O is stopped for it) and lets the application enqueue NNEW
 *    new messages;
 *  - D keeps per life a watermark and every received row with its digest
 *    (receipt_retention long enough: no row is purged, so UNDECIDED never
 *    happens); another digest under a seq, or a prev_digest that is not the
 *    recorded predecessor's, is refused CONFLICT with D's high; R refuses
 *    a Data/Query for an id of which it holds a copy of another digest,
 *    holds a copy its destination refuses, and drops a copy when the
 *    origin's 810-Response carries its digest; O on a CONFLICT for its own
 *    row moves its counter past high, renumbers the row and its key's
 *    unconfirmed later rows, and takes the old ids back (810-Response);
 *  - StreamQuery/StreamState are not modelled: the digests alone must keep
 *    every property.
 *  - Three rules differ from node/proto.c at 88517c5, whose rules the
 *    model found wrong (README.md): a verdict is recorded only for the row
 *    that holds its digest (proto.c too since 7fe2f1d); a CONFLICT for a
 *    row whose key predecessor is unconfirmed asks about the predecessor
 *    before renumbering; a refusal of an id renumbered already takes the
 *    old copy back again, and R repeats the refusal of a copy it holds to
 *    the origin. BROKEN_VERDICT_NO_DIGEST, BROKEN_RENUMBER_FROM_REFUSED and
 *    BROKEN_RETRACT_ONCE are proto.c's rules at 88517c5, and fail.
 *
 * Variants (spin -D...): NSEQ (1-3), QLEN, the budgets; LIVES with NLIFE (1,
 * 2 for re-images), NNEW, MAXSEQ; COVER (the cover checks);
 * BROKEN_NO_WATERMARK_CHECK, BROKEN_ACK_BEFORE_COMMIT, BROKEN_BLIND_RESEND,
 * BROKEN_RELAY_NO_RESEND, and with LIVES BROKEN_NO_DIGEST (the receiver
 * takes a copy under a seq it has for a duplicate whatever its digest) and
 * the three above (designs that must fail, or show what does not matter).
 */

#ifndef NSEQ
#define NSEQ 2
#endif
#if defined(LIVES) && (defined(BROKEN_ACK_BEFORE_COMMIT) || \
		       defined(BROKEN_BLIND_RESEND) || \
		       defined(BROKEN_NO_WATERMARK_CHECK))
#error "these variants are of the model without LIVES"
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

#ifdef LIVES
#ifndef RESTORES
#define RESTORES 0
#endif
#ifndef REIMAGES
#define REIMAGES 0
#endif
#ifndef NLIFE
#define NLIFE 1 /* 2: a re-image is possible */
#endif
#ifndef NNEW
#define NNEW NSEQ /* messages the application enqueues after an event */
#endif
#ifndef MAXSEQ
#define MAXSEQ 6 /* seqs a life may hand out (renumbering takes more) */
#endif
#define NS MAXSEQ
#if NLIFE == 2
#define NC (NSEQ + 2 * NNEW) /* contents: the first ones, NNEW per event */
#else
#define NC (NSEQ + NNEW)
#endif
#else
#define NLIFE 1
#define NS NSEQ
#define NC NSEQ
#endif
#define NX (NLIFE * (NS + 1))          /* slots (life, seq) of R and D */
#define IX(lv, xv) ((lv) * (NS + 1) + (xv)) /* slot of (life, seq) */

/* tb_0031 status on the origin (SPEC §4) */
#define SS_UNSEND 0
#define SS_SEND 4
#define SS_ACK 6
#define SS_ACK2 100

/* the relay's store-and-forward copy: a tb_0031 row of another origin */
#define CP_NONE 0
#define CP_UNSEND 1 /* status 0 */
#define CP_SEND 2   /* status 4 */
#define CP_HELD 3   /* status 8: its destination refused it (LIVES) */

/* the receiver's tb_0030 row; RX_NONE with seq <= wm is compacted */
#define RX_NONE 0
#define RX_INIT 1 /* AS_INIT */
#define RX_OK 2   /* AS_OK */

#define CONFIRM_ORIGIN 1
#define CONFIRM_RELAY 2
#define HELD_STALE 4 /* the connection a held copy came on is gone */

#define PREV(s) ((s) - 1) /* prev_seq: one key */

/* Frame kinds. */
#define F_DATA 1   /* Data, stored_by empty */
#define F_DATAS 2  /* Data from R's copy, stored_by = R */
#define F_QUERY 3  /* Query */
#define F_RESPO 4  /* 810-Response from O (with LIVES: with the digest) */
#define F_RESPR 5  /* 810-Response from R */
#define F_IND 6    /* 810-Indication */
#define F_QR0 7    /* QueryReply: not received */
#define F_QR1 8    /* QueryReply: received */
#define F_RACK 9   /* RelayAck (forwarded, stored, custody) */
#define F_CONF 10  /* 810-Indication, DUPLICATE with refusal CONFLICT */
#define F_QRC 11   /* QueryReply, received with refusal CONFLICT */
/* The kinds' names for trails (printf %e): Spin numbers mtypes from the
 * last one declared (1) up, so this list runs from F_QRC down to F_DATA. */
mtype = {
	ReplyConflict, Conflict, RelayAck, ReplyReceived, ReplyNotReceived,
	Indication810, Response810FromR, Response810FromO, Query, DataCopy,
	Data
};

/*
 * A frame: its kind and the message id it is about. With LIVES: kind,
 * life, seq, content (the digest) and x: prev_seq in a Data, high in a
 * refusal. Without: kind * 4 + seq (the content is the seq).
 */
#ifdef LIVES
#define FT short
#define FRAME(kv, ll, ss, cc, xx)                                             \
	((kv) * 1024 + (ll) * 512 + (xx) * 64 + (cc) * 8 + (ss))
#define KIND (f / 1024)
#define DECODE                                                               \
	s = f % 8;                                                           \
	cv = (f / 8) % 8;                                                     \
	xv = (f / 64) % 8;                                                    \
	lv = (f / 512) % 2
#else
#define FT byte
#define FRAME(kv, ll, ss, cc, xx) ((kv) * 4 + (ss))
#define KIND (f / 4)
#define DECODE                                                               \
	s = f % 4;                                                           \
	cv = s;                                                              \
	xv = PREV(s); /* prev_seq of a Data */                              \
	lv = 0
#endif

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

#ifdef LIVES
/* Lists over the seqs 1..NS (SEQS), the slots (life, seq) (SLOTS) and the
 * contents 1..NC (CONTENTS), joined by OP (&& or ||). */
#if NS == 5
#define SEQS(M, ll, OP) M(ll, 1) OP M(ll, 2) OP M(ll, 3) OP M(ll, 4) OP M(ll, 5)
#define EACH_S(M) M(1) M(2) M(3) M(4) M(5)
#elif NS == 6
#define SEQS(M, ll, OP)                                                      \
	M(ll, 1) OP M(ll, 2) OP M(ll, 3) OP M(ll, 4) OP M(ll, 5) OP M(ll, 6)
#define EACH_S(M) M(1) M(2) M(3) M(4) M(5) M(6)
#elif NS == 7
#define SEQS(M, ll, OP)                                                      \
	M(ll, 1) OP M(ll, 2) OP M(ll, 3) OP M(ll, 4) OP M(ll, 5) OP M(ll,     \
								       6) OP \
	    M(ll, 7)
#define EACH_S(M) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#else
#error "MAXSEQ must be 5, 6 or 7"
#endif
#if NLIFE == 2
#define SLOTS(M, OP) (SEQS(M, 0, OP) OP SEQS(M, 1, OP))
#else
#define SLOTS(M, OP) (SEQS(M, 0, OP))
#endif
#if NC == 3
#define CONTENTS(M, OP) (M(1) OP M(2) OP M(3))
#elif NC == 4
#define CONTENTS(M, OP) (M(1) OP M(2) OP M(3) OP M(4))
#elif NC == 5
#define CONTENTS(M, OP) (M(1) OP M(2) OP M(3) OP M(4) OP M(5))
#elif NC == 6
#define CONTENTS(M, OP) (M(1) OP M(2) OP M(3) OP M(4) OP M(5) OP M(6))
#elif NC == 7
#define CONTENTS(M, OP) (M(1) OP M(2) OP M(3) OP M(4) OP M(5) OP M(6) OP M(7))
#else
#error "NSEQ + NNEW per event must be 3 to 7"
#endif
#define O_SEQS(P, OP) (SEQS(P, 0, OP)) /* O's rows: P(_, s) */
#else
#define EACH_S(M) EACH(M)
#endif

/* ---- durable state ------------------------------------------------------ */

#ifdef LIVES
byte olife;         /* O: its database's life (0; 1 after a re-image) */
byte ctr;           /* O: the stream's counter (the last seq handed out) */
byte ost[NS + 1];   /* O: tb_0031 status of the row at seq s */
byte oc[NS + 1];    /* O: its content (digest); 0 = no row at s */
#define ROW(xv) (oc[xv] != 0)
#define OC(xv) oc[xv]
/* the snapshot a restore puts back (RESTORES) */
bool snapped;
byte s_life, s_ctr, s_ost[NS + 1], s_oc[NS + 1];
/* the application */
byte quota;         /* messages it enqueues still */
byte nextc;         /* contents used */
#else
byte ost[NSEQ + 1]; /* O: tb_0031 status of seq s */
#define ROW(xv) 1
#define OC(xv) (xv)
#define olife 0
#endif
#define IN_DOUBT(xv) (ROW(xv) && (ost[xv] == SS_SEND || ost[xv] == SS_ACK))

byte cp[NX];         /* R: its copy of (life, s) */
#ifdef LIVES
FT cpf[NX];          /* R: the copy's message: FRAME(0, l, s, c, prev) */
byte rhigh[NLIFE];   /* R: the highest seq it relayed or stored, per life */
#define CPC(ix) ((cpf[ix] / 8) % 8)
#else
#define CPC(ix) (ix)
#endif
byte rx[NX];         /* D: tb_0030 row of (life, s) */
byte need[NX];       /* D: confirm_need of the row */
byte got[NX];        /* D: confirm_got of the row */
#ifdef LIVES
byte rxc[NX];        /* D: the row's content (digest) */
byte wm[NLIFE];      /* D: confirmed_through of the stream of each life */
#define WM(ll) wm[ll]
#define RXC(ix) rxc[ix]
byte eff[NC + 1];    /* D: times content c took effect */
/* ghosts: facts of the application, not state of any node */
byte prevc[NC + 1];  /* the key predecessor of content c (0: none) */
byte g_app;          /* bit c: c is a row of O (enqueued, not lost) */
byte g_reached;      /* bit c: R stored a copy of c, or D recorded it */
byte g_must;         /* bit c: c must take effect (see upd_must) */
#define BIT(v, b) (((v) >> (b)) & 1)
#else
byte wm;             /* D: confirmed_through of the stream */
#define WM(ll) wm
#define RXC(ix) (ix)
byte eff[NSEQ + 1];  /* D: times s took effect (business tables) */
#endif

/* ---- volatile state ----------------------------------------------------- */

byte held[NX]; /* D: held for its predecessor: need | HELD_STALE */
#ifdef LIVES
FT heldf[NX];  /* D: the held message: FRAME(0, l, s, c, prev) */
#endif
#ifdef BROKEN_ACK_BEFORE_COMMIT
byte pend[NSEQ + 1]; /* D: indicated, not yet committed: its need */
#endif
bool up_or, up_rd; /* connections O-R and R-D */

/* One FIFO per direction: q_xy holds what x sent to y, n_xy frames. */
FT q_or[QLEN], q_ro[QLEN], q_rd[QLEN], q_dr[QLEN];
byte n_or, n_ro, n_rd, n_dr;

/* fault budgets */
byte losses = LOSS, dups = DUPS, reorders = REORDER, drops = DROPS;
byte crashes = CRASHES, early = EARLY;
#ifdef LIVES
byte restores = RESTORES, reimages = REIMAGES;
#endif

#ifdef COVER
/* ghosts for the cover checks, compiled in only for them */
bool saw_late_dup; /* a Data with seq <= wm reached D */
bool saw_held;     /* D held a message for its predecessor */
bool saw_copy;     /* D got a Data from R's stored copy */
bool saw_conflict; /* a CONFLICT reached O and it renumbered (LIVES) */
bool saw_prevconf; /* D refused a message for its prev_digest (LIVES) */
#define GHOST(v) v = 1
#else
#define GHOST(v) skip
#endif

/* scratch inside one d_step (never part of the state) */
hidden FT f;
hidden byte i, j, kv, mv, s, lv, cv, xv, ov, hi, hs, hl, hc, hx;

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
	DECODE;                                                                \
	i = 0
#define CLEAR(q, n)                                                            \
	i = 0;                                                                 \
	do                                                                     \
	:: i < n -> q[i] = 0; i++                                              \
	:: else -> break                                                       \
	od;                                                                    \
	n = 0;                                                                 \
	i = 0

#define QUIET_NET (n_or + n_ro + n_rd + n_dr == 0)
#ifdef BROKEN_ACK_BEFORE_COMMIT
#define PENDING(v) (pend[v] != 0)
#define QUIET (QUIET_NET && !ANY(PENDING))
#else
#define QUIET QUIET_NET
#endif

/* ---- the properties ----------------------------------------------------- */

#ifndef LIVES
/* Safety, in every state: at most one effect; key order; a confirmed
 * origin row (100) and a seq at or below the watermark have taken effect. */
#define INV(v)                                                                 \
	(eff[v] <= 1 &&                                                        \
	 (PREV(v) == 0 || eff[v] == 0 || eff[PREV(v)] == 1) &&                \
	 (ost[v] != SS_ACK2 || eff[v] == 1) && ((v) > wm || eff[v] == 1))
#define EFFECT(v) (eff[v] == 1)
#define CONFIRMED(v) (ost[v] == SS_ACK2)
#define NOCOPY(v) (cp[v] == CP_NONE)

/* Checked in every state (pan -N invariant). */
ltl invariant { [] ALL(INV) }

/* Liveness, under weak fairness (pan -a -f): the fault budgets are finite
 * and connections come back, so these must hold on every fair run. */
ltl delivered { <> ALL(EFFECT) }
ltl confirmed { <> ALL(CONFIRMED) }
ltl compacted { <> (wm == NSEQ) }
ltl relay_drained { <> [] ALL(NOCOPY) }
#else
/*
 * Safety, in every state: every content took effect at most once, and
 * only after its key predecessor; a confirmed origin row (100) holds a
 * content that took effect; a seq at or below a watermark has a row whose
 * content took effect. The model asserts besides that O records a verdict
 * only for the content it was given for (o_verdict), never a new row under
 * a watermark (d_record), and that prev_seq names the predecessor (o_prev).
 */
#define INV_C(v) (eff[v] <= 1 && (eff[v] == 0 || prevc[v] == 0 ||            \
				  eff[prevc[v]] == 1))
#define INV_O(ll, v) (!ROW(v) || ost[v] != SS_ACK2 || eff[oc[v]] == 1)
#define INV_D(ll, v)                                                           \
	((v) > wm[ll] || (rx[IX(ll, v)] != RX_NONE && eff[rxc[IX(ll, v)]] == 1))
ltl invariant {
	[] (CONTENTS(INV_C, &&) && O_SEQS(INV_O, &&) && SLOTS(INV_D, &&))
}

/*
 * Liveness (pan -a -f). g_must: what must take effect — every row of O
 * (enqueued and not lost by a restore or re-image), and a message of a
 * lost timeline that reached R (a copy) or D (recorded) when its
 * predecessor must too. Rows and lost messages change with the events, so
 * the properties are "eventually always".
 */
#define DONE_C(v) (!BIT(g_must, v) || eff[v] == 1)
#define CONF_O(ll, v) (!ROW(v) || ost[v] == SS_ACK2)
#define WM_D(ll, v) (rx[IX(ll, v)] == RX_NONE || (v) <= wm[ll])
/* the relay holds no copy of a message that must take effect (a copy of a
 * lost message that cannot, held for its operator, may stay) */
#define DRAIN_R(ll, v)                                                         \
	(cp[IX(ll, v)] == CP_NONE || !BIT(g_must, CPC(IX(ll, v))))
ltl delivered { <> [] CONTENTS(DONE_C, &&) }
ltl confirmed { <> [] O_SEQS(CONF_O, &&) }
ltl compacted { <> [] SLOTS(WM_D, &&) }
ltl relay_drained { <> [] SLOTS(DRAIN_R, &&) }
#endif
#ifdef COVER
/* Cover checks: each must be violated, i.e. the situation is reachable. */
ltl cover_late_dup { [] !saw_late_dup }
ltl cover_held { [] !saw_held }
ltl cover_copy { [] !saw_copy }
#ifdef LIVES
ltl cover_conflict { [] !saw_conflict }
ltl cover_prev_conflict { [] !saw_prevconf }
#endif
#endif

#ifdef LIVES
/* g_must from g_app, g_reached and prevc (a predecessor's content is
 * always a smaller number: one pass upwards) */
inline upd_must()
{
	g_must = 0;
	mv = 1;
	do
	:: mv <= NC ->
		if
		:: BIT(g_app, mv) ||
		   (BIT(g_reached, mv) &&
		    (prevc[mv] == 0 || BIT(g_must, prevc[mv]))) ->
			g_must = g_must | (1 << mv)
		:: else -> skip
		fi;
		mv++
	:: else -> break
	od;
	mv = 0
}
#define REACHED(v) g_reached = g_reached | (1 << (v)); upd_must()
#else
#define REACHED(v) skip
#endif

/* ---- origin O (node/proto.c: send_pending, on_relay_ack, on_indication,
 *      on_query_reply, on_refusal, query_in_doubt, on_peer_up) ---------- */

/* k := prev_seq of the row at seq v: the key's row below it */
inline o_prev(v)
{
#ifdef LIVES
	kv = v - 1;
	do
	:: kv > 0 && !ROW(kv) -> kv--
	:: else -> break
	od;
	/* the row below is the predecessor (prev_digest = its digest) */
	assert((kv == 0 && prevc[oc[v]] == 0) ||
	       (kv > 0 && oc[kv] == prevc[oc[v]]));
#else
	kv = PREV(v)
#endif
}

/* the tick's send_pending: every row in status 0 goes out, 0 -> 4 */
inline o_tick()
{
	if
	:: up_or ->
		j = 1;
		do
		:: j <= NS ->
			if
			:: ROW(j) && ost[j] == SS_UNSEND ->
				ost[j] = SS_SEND;
				o_prev(j);
				PUSH(q_or, n_or, FRAME(F_DATA, olife, j, OC(j), kv));
				printf("O: Data %d (content %d, prev %d), status 4\n",
				       j, OC(j), kv)
			:: else -> skip
			fi;
			j++
		:: else -> break
		od;
		j = 0;
		kv = 0
	:: else -> skip
	fi
}

#ifdef BROKEN_BLIND_RESEND
/* an in-doubt row is sent again without asking first */
#define O_TIMER(v) ost[v] = SS_UNSEND; printf("O: %d blindly resent\n", v)
#define O_TIMER_END o_tick()
#else
#define O_TIMER(v)                                                             \
	PUSH(q_or, n_or, FRAME(F_QUERY, olife, v, OC(v), 0));                  \
	printf("O: query %d (content %d)\n", v, OC(v))
#define O_TIMER_END skip
#endif

/* An 810-Indication or a "received" reply about (l, s, c): the row takes
 * the verdict (store_mark_confirmed: 0/4/6 -> 100, declined at 100); an
 * 810-Response either way, with the id and digest of the verdict. */
inline o_verdict()
{
#ifdef LIVES
	if
	:: lv != olife ->
		/* a message of an earlier life: nothing of it is here; the
		 * receiver finishes its record */
		printf("O: verdict %d:%d of an earlier life\n", lv, s)
#ifdef BROKEN_VERDICT_NO_DIGEST
	/* as proto.c did at 88517c5 (before 7fe2f1d): the row at that seq takes the
	 * verdict, whatever message it was given for */
	:: lv == olife && ROW(s) && ost[s] != SS_ACK2 ->
#else
	:: lv == olife && ROW(s) && ost[s] != SS_ACK2 && oc[s] == cv ->
#endif
		/* never a verdict given for another message */
		assert(oc[s] == cv);
		ost[s] = SS_ACK2;
		printf("O: %d (content %d) takes the verdict about content %d, status 100\n",
		       s, oc[s], cv)
	:: else ->
		printf("O: verdict %d (content %d) recorded nowhere\n", s, cv)
	fi;
#else
	ost[s] = SS_ACK2;
	printf("O: %d confirmed, status 100\n", s);
#endif
	PUSH(q_or, n_or, FRAME(F_RESPO, lv, s, cv, 0));
	printf("O: 810-Response %d\n", s)
}

#ifdef LIVES
#ifdef BROKEN_RENUMBER_FROM_REFUSED
#define ASK_PRED_FIRST false /* as proto.c at 88517c5: renumber at once */
#else
#define ASK_PRED_FIRST (kv > 0 && ost[kv] != SS_ACK2)
#endif
#ifdef BROKEN_RETRACT_ONCE
#define RETAKE false /* as proto.c at 88517c5: the old id is taken back once */
#else
#define RETAKE (lv == olife && kv <= NS && kv != s)
#endif

/*
 * on_refusal: a CONFLICT (from D, or from R holding another copy) about
 * (lv, s, cv, high xv). For O's own row with that digest, not confirmed:
 * the counter moves past high; then the row and its key's unconfirmed
 * later rows get the next seqs in order, and the old ids go back towards D
 * with their digests (an 810-Response: a relay's copy of one of them
 * goes) — unless the row's key predecessor is not confirmed either: the
 * refusal may be about that one (D holds another message under the
 * predecessor's seq: prev_digest), and renumbering this row alone would be
 * refused again, and again (BROKEN_RENUMBER_FROM_REFUSED). The predecessor
 * is asked about at once instead: its own refusal renumbers both, or its
 * verdict lets this row's next refusal renumber it.
 */
inline o_refusal()
{
	if
	:: lv == olife && ROW(s) && oc[s] == cv && ost[s] != SS_ACK2 ->
		GHOST(saw_conflict);
		if
		:: xv > ctr -> ctr = xv
		:: else -> skip
		fi;
		printf("O: CONFLICT %d (content %d, high %d): counter %d\n", s,
		       cv, xv, ctr);
		o_prev(s);
		if
		:: ASK_PRED_FIRST ->
			PUSH(q_or, n_or, FRAME(F_QUERY, olife, kv, oc[kv], 0));
			printf("O: predecessor %d not confirmed: query %d\n", kv,
			       kv)
		:: else ->
			hi = ctr; /* the rows to renumber are at or below it */
			j = s;
			do
			:: j <= hi ->
				if
				:: ROW(j) && ost[j] != SS_ACK2 ->
					assert(ctr < NS); /* MAXSEQ too small */
					ctr++;
					oc[ctr] = oc[j];
					ost[ctr] = SS_UNSEND;
					PUSH(q_or, n_or,
					     FRAME(F_RESPO, olife, j, oc[j], 0));
					printf("O: %d (content %d) renumbered %d\n",
					       j, oc[j], ctr);
					oc[j] = 0;
					ost[j] = 0
				:: else -> skip
				fi;
				j++
			:: else -> break
			od;
			j = 0;
			hi = 0;
			o_tick()
		fi;
		kv = 0
	:: else ->
		/* Not this row: a refusal of an id this node renumbered
		 * already (a row holds that digest under another seq) means a
		 * relay still holds the old copy and the 810-Response that
		 * takes it back was lost: it goes again. A copy of a lost
		 * timeline's message (a digest no row has) stays held at the
		 * relay for the operator. */
		kv = 1;
		do
		:: kv <= NS && !(ROW(kv) && oc[kv] == cv) -> kv++
		:: else -> break
		od;
		if
		:: RETAKE ->
			PUSH(q_or, n_or, FRAME(F_RESPO, olife, s, cv, 0));
			printf("O: %d (content %d) is %d now: 810-Response %d\n",
			       s, cv, kv, s)
		:: else ->
			printf("O: CONFLICT %d:%d (content %d): not this row\n",
			       lv, s, cv)
		fi;
		kv = 0
	fi
}
#endif

inline o_frame()
{
	if
	:: KIND == F_RACK ->
		/* RelayAck forwarded / stored, or R's custody: 4 -> 6 */
		if
		:: lv == olife && ROW(s) && ost[s] == SS_SEND -> ost[s] = SS_ACK
		:: else -> skip
		fi;
		printf("O: RelayAck %d, status %d\n", s, ost[s])
	:: KIND == F_IND -> printf("O: 810-Indication %d\n", s); o_verdict()
	:: KIND == F_QR1 -> printf("O: reply: %d received\n", s); o_verdict()
	:: KIND == F_QR0 ->
		printf("O: reply: %d not received\n", s);
		/* 4/6 -> 0, sent again by the tick */
		if
		:: lv == olife && IN_DOUBT(s) -> ost[s] = SS_UNSEND
		:: else -> skip
		fi;
		o_tick()
#ifdef LIVES
	:: KIND == F_CONF || KIND == F_QRC -> o_refusal()
#endif
	:: else -> assert(false)
	fi
}

#define O_EARLY(v)                                                             \
	:: d_step { early > 0 && !QUIET && up_or && IN_DOUBT(v) -> early--;   \
		printf("O: early timer (a query races frames in flight)\n");   \
		O_TIMER(v); O_TIMER_END }

proctype Origin()
{
end:
	do
	:: d_step { n_ro > 0 -> POP(q_ro, n_ro); o_frame() }
	EACH_S(O_EARLY)
	od
}

/* ---- relay R, store_and_forward = yes (relay_one, on_indication,
 *      on_response, on_query, on_query_reply with answer_for_copy and
 *      hold_copy, send_pending and query_in_doubt for its copies) -------- */

/* what R does with a frame to pass on to O: dropped when O is away */
#define TO_O(kv)                                                                \
	if                                                                     \
	:: up_or -> PUSH(q_ro, n_ro, FRAME(kv, lv, s, cv, xv))                     \
	:: else -> skip                                                        \
	fi
#define TO_D(kv)                                                                \
	if                                                                     \
	:: up_rd -> PUSH(q_rd, n_rd, FRAME(kv, lv, s, cv, xv))                     \
	:: else -> skip                                                        \
	fi

#ifdef LIVES
/* R holds a copy of another message (digest) under the id in hand */
#define CP_OTHER (cp[IX(lv, s)] != CP_NONE && CPC(IX(lv, s)) != cv)
/* the copy in hand is of that very message */
#define CP_SAME (cp[IX(lv, s)] != CP_NONE && CPC(IX(lv, s)) == cv)
/* relayed_add: the highest seq relayed or stored, per life */
#define R_NOTE                                                                 \
	if                                                                     \
	:: s > rhigh[lv] -> rhigh[lv] = s                                        \
	:: else -> skip                                                        \
	fi
/* stream_high at R: its relay high, at least the seq in hand */
#define R_HIGH                                                                 \
	if                                                                     \
	:: rhigh[lv] > s -> hi = rhigh[lv]                                        \
	:: else -> hi = s                                                       \
	fi
#define CP_FRAME(ix) (F_DATAS * 1024 + cpf[ix])
#else
#define CP_OTHER false
#define CP_SAME (cp[IX(lv, s)] != CP_NONE)
#define R_NOTE skip
#define CP_FRAME(ix) FRAME(F_DATAS, 0, ix, ix, 0)
#endif

inline r_from_o()
{
	if
	:: KIND == F_DATA ->
		if
#ifdef LIVES
		:: CP_OTHER ->
			/* another message's copy is held under this id */
			R_HIGH;
			PUSH(q_ro, n_ro, FRAME(F_CONF, lv, s, cv, hi));
			printf("R: Data %d (content %d): CONFLICT with copy %d\n",
			       s, cv, CPC(IX(lv, s)));
			hi = 0
#endif
		:: CP_SAME ->
			/* in custody here: STORED, never forwarded around it */
			PUSH(q_ro, n_ro, FRAME(F_RACK, lv, s, cv, 0));
			printf("R: Data %d: copy held, RelayAck STORED\n", s)
		:: cp[IX(lv, s)] == CP_NONE && up_rd ->
			PUSH(q_rd, n_rd, f);
			R_NOTE;
			PUSH(q_ro, n_ro, FRAME(F_RACK, lv, s, cv, 0));
			printf("R: Data %d forwarded\n", s)
		:: cp[IX(lv, s)] == CP_NONE && !up_rd ->
			cp[IX(lv, s)] = CP_UNSEND;
#ifdef LIVES
			cpf[IX(lv, s)] = f % 1024;
#endif
			R_NOTE;
			REACHED(cv);
			PUSH(q_ro, n_ro, FRAME(F_RACK, lv, s, cv, 0));
			printf("R: Data %d stored, copy %d\n", s, cp[IX(lv, s)])
		fi
	:: KIND == F_QUERY ->
		if
#ifdef LIVES
		:: CP_OTHER ->
			/* the asker's message cannot be the copy held here */
			R_HIGH;
			PUSH(q_ro, n_ro, FRAME(F_QRC, lv, s, cv, hi));
			printf("R: query %d (content %d): CONFLICT\n", s, cv);
			hi = 0
#endif
		:: else -> TO_D(F_QUERY)
		fi
	:: KIND == F_RESPO ->
#ifdef LIVES
		/* from the origin with a digest: a copy of that message goes
		 * (the origin is done with that id) */
		if
		:: CP_SAME -> cp[IX(lv, s)] = CP_NONE; cpf[IX(lv, s)] = 0;
			printf("R: 810-Response %d from O: copy dropped\n", s)
		:: else -> skip
		fi;
#endif
		TO_D(F_RESPO)
	:: else -> assert(false)
	fi
}

/* drop the copy in hand when it is of that message (store_drop_copy
 * with the digest) */
inline r_drop()
{
	if
	:: CP_SAME ->
#ifdef LIVES
		cpf[IX(lv, s)] = 0;
#endif
		cp[IX(lv, s)] = CP_NONE
	:: else -> skip
	fi
}

inline r_from_d()
{
	if
	:: KIND == F_IND ->
		r_drop(); /* store_drop_copy */
		printf("R: 810-Indication %d: copy dropped, 810-Response\n", s);
		PUSH(q_rd, n_rd, FRAME(F_RESPR, lv, s, cv, 0));
		TO_O(F_IND)
#ifdef LIVES
	:: KIND == F_CONF || (KIND == F_QRC && cp[IX(lv, s)] != CP_NONE) ->
		/* hold_copy: a copy of that message is held (status 8) until
		 * its origin takes it back; the refusal goes on to O */
		if
		:: CP_SAME && cp[IX(lv, s)] != CP_HELD ->
			cp[IX(lv, s)] = CP_HELD;
			printf("R: %d refused: copy held\n", s)
		:: else -> skip
		fi;
		TO_O(KIND)
	:: KIND == F_QRC && cp[IX(lv, s)] == CP_NONE -> TO_O(F_QRC)
#endif
	/* on_query_reply, answer_for_copy: an answer about a copy R holds
	 * answers R's own query first */
#ifndef BROKEN_RELAY_NO_RESEND
	:: KIND == F_QR1 && cp[IX(lv, s)] != CP_NONE ->
		/* the destination has it: the copy is done, R confirms */
		r_drop();
		printf("R: %d received: copy dropped, 810-Response\n", s);
		PUSH(q_rd, n_rd, FRAME(F_RESPR, lv, s, cv, 0));
		TO_O(F_QR1)
	:: KIND == F_QR0 && cp[IX(lv, s)] != CP_NONE ->
		/* a copy R had sent goes out again (4 -> 0, the tick sends
		 * it); O hears custody instead of "not received" */
		printf("R: %d not received, copy held: custody\n", s);
		if
		:: cp[IX(lv, s)] == CP_SEND ->
			if
			:: up_rd -> PUSH(q_rd, n_rd, CP_FRAME(IX(lv, s)));
				printf("R: copy %d sent again\n", s)
			:: else -> cp[IX(lv, s)] = CP_UNSEND
			fi
		:: else -> skip
		fi;
		TO_O(F_RACK)
#else
	/* before f3e1eeb: custody, and the copy is never sent again */
	:: KIND == F_QR1 && cp[IX(lv, s)] != CP_NONE -> TO_O(F_QR1)
	:: KIND == F_QR0 && cp[IX(lv, s)] != CP_NONE ->
		printf("R: %d not received, copy held: custody\n", s);
		TO_O(F_RACK)
#endif
	:: KIND == F_QR1 && cp[IX(lv, s)] == CP_NONE -> TO_O(F_QR1)
	:: KIND == F_QR0 && cp[IX(lv, s)] == CP_NONE -> TO_O(F_QR0)
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

/* What store_receive makes of the message (ll, ss, cc, prev pp): */
#define D_AGAIN 0    /* its predecessor is missing: held */
#define D_DUP 1      /* seen: the recorded verdict */
#define D_CONFLICT 2 /* another message under its seq, or its predecessor
		      * is not the one recorded (LIVES) */
#define D_NEW 3      /* recorded and applied */
#ifdef LIVES
#ifdef BROKEN_NO_DIGEST
#define DIFF(ix, cc) false /* a same-seq copy is a duplicate, any digest */
#else
#define DIFF(ix, cc) (rxc[ix] != (cc))
#endif
#define PDIFF(ix, cc) (rxc[ix] != prevc[cc])
#else
#define DIFF(ix, cc) false
#define PDIFF(ix, cc) false
#endif
#ifdef BROKEN_NO_WATERMARK_CHECK
#define UNDER_WM(ll, ss) false /* forgets the compacted ids */
#else
#define UNDER_WM(ll, ss) ((ss) <= WM(ll))
#endif

inline d_decide(ll, ss, cc, pp)
{
	if
	:: rx[IX(ll, ss)] != RX_NONE && DIFF(IX(ll, ss), cc) -> ov = D_CONFLICT
	:: rx[IX(ll, ss)] != RX_NONE && !DIFF(IX(ll, ss), cc) -> ov = D_DUP
	:: rx[IX(ll, ss)] == RX_NONE && UNDER_WM(ll, ss) ->
#ifdef LIVES
		/* rows are kept (receipt_retention): never without one */
		assert(false);
#endif
		ov = D_DUP
	:: else ->
		if
		:: pp == 0 -> ov = D_NEW
		:: pp > 0 && rx[IX(ll, pp)] != RX_NONE && PDIFF(IX(ll, pp), cc) ->
			ov = D_CONFLICT;
			GHOST(saw_prevconf)
		:: pp > 0 && rx[IX(ll, pp)] != RX_NONE &&
		   !PDIFF(IX(ll, pp), cc) -> ov = D_NEW
		:: pp > 0 && rx[IX(ll, pp)] == RX_NONE && pp <= WM(ll) -> ov = D_NEW
		:: pp > 0 && rx[IX(ll, pp)] == RX_NONE && pp > WM(ll) -> ov = D_AGAIN
		fi
	fi
}

/* t := stream_high at D of life ll, at least ss: the highest seq it has a
 * row of (rows are kept), or its watermark */
inline d_high(ll, ss)
{
	hi = NS;
	do
	:: hi > 0 && rx[IX(ll, hi)] == RX_NONE -> hi--
	:: else -> break
	od;
	if
	:: hi < WM(ll) -> hi = WM(ll)
	:: else -> skip
	fi;
	if
	:: hi < ss -> hi = ss
	:: else -> skip
	fi
}

inline d_record(ll, ss, cc, nd)
{
	/* tb_0030 row and the plugin's effect, one transaction */
	assert(ss > WM(ll)); /* a compacted id is never taken for a new one */
	rx[IX(ll, ss)] = RX_INIT;
	need[IX(ll, ss)] = nd;
	got[IX(ll, ss)] = 0;
#ifdef LIVES
	rxc[IX(ll, ss)] = cc;
#endif
	eff[cc]++;
	REACHED(cc);
	printf("D: %d:%d recorded and applied (content %d, need %d)\n", ll,
	       ss, cc, nd)
}

/* retry_held: held messages whose predecessor is in (or that are refused
 * now) are recorded or answered; the verdict goes to the connection the
 * copy came on (lost if gone) */
inline d_tick()
{
	j = 1;
	do
	:: j < NX ->
		if
		:: held[j] != 0 ->
			hl = j / (NS + 1);
			hs = j % (NS + 1);
#ifdef LIVES
			hc = (heldf[j] / 8) % 8;
			hx = (heldf[j] / 64) % 8;
#else
			hc = hs;
			hx = PREV(hs);
#endif
			d_decide(hl, hs, hc, hx);
			if
			:: ov == D_AGAIN -> j++
			:: else ->
				if
				:: ov == D_NEW -> d_record(hl, hs, hc, held[j] & 3)
				:: else -> skip
				fi;
				if
				:: up_rd && !(held[j] & HELD_STALE) ->
					if
					:: ov == D_CONFLICT -> d_high(hl, hs);
						PUSH(q_dr, n_dr, FRAME(F_CONF, hl, hs, hc, hi));
						hi = 0
					:: else ->
						PUSH(q_dr, n_dr, FRAME(F_IND, hl, hs, hc, 0))
					fi
				:: else -> skip
				fi;
				held[j] = 0;
#ifdef LIVES
				heldf[j] = 0;
#endif
				j = 1
			fi
		:: else -> j++
		fi
	:: else -> break
	od;
	j = 0;
	ov = 0;
	hl = 0;
	hs = 0;
	hc = 0;
	hx = 0
}

#ifdef BROKEN_ACK_BEFORE_COMMIT
/* the indication leaves first, the commit comes in a later step */
#define D_NEWMSG(nd)                                                           \
	pend[s] = nd;                                                          \
	PUSH(q_dr, n_dr, FRAME(F_IND, lv, s, cv, 0));                            \
	printf("D: %d indicated, not yet committed\n", s)
#else
#define D_NEWMSG(nd)                                                           \
	d_record(lv, s, cv, nd);                                                 \
	PUSH(q_dr, n_dr, FRAME(F_IND, lv, s, cv, 0));                            \
	d_tick()
#endif

inline d_receive(nd)
{
#ifdef COVER
	if
	:: s <= WM(lv) -> saw_late_dup = 1
	:: else -> skip
	fi;
#endif
	d_decide(lv, s, cv, xv);
	if
	:: ov == D_DUP -> PUSH(q_dr, n_dr, FRAME(F_IND, lv, s, cv, 0)); /* duplicate */
		printf("D: %d duplicate (wm %d)\n", s, WM(lv))
	:: ov == D_CONFLICT -> d_high(lv, s);
		PUSH(q_dr, n_dr, FRAME(F_CONF, lv, s, cv, hi));
		printf("D: %d:%d (content %d, prev %d) refused: CONFLICT, high %d\n",
		       lv, s, cv, xv, hi);
		hi = 0
	:: ov == D_NEW -> D_NEWMSG(nd)
	:: ov == D_AGAIN ->
		/* held in memory until its predecessor is recorded */
		GHOST(saw_held);
		if
		:: held[IX(lv, s)] == 0 ->
#ifdef LIVES
			heldf[IX(lv, s)] = f % 1024;
#endif
			held[IX(lv, s)] = nd
		:: else -> skip
		fi;
		printf("D: %d held\n", s)
	fi;
	ov = 0
}

inline d_response(cbit)
{
	if
	:: rx[IX(lv, s)] == RX_INIT ->
		/* store_ack_response: by id (no digest) */
		got[IX(lv, s)] = got[IX(lv, s)] | cbit;
		if
		:: (got[IX(lv, s)] & need[IX(lv, s)]) == need[IX(lv, s)] ->
			rx[IX(lv, s)] = RX_OK;
#ifdef LIVES
			need[IX(lv, s)] = 0; /* no longer read */
			got[IX(lv, s)] = 0
#else
			skip
#endif
		:: else -> skip
		fi;
		/* store_advance_watermarks in the tick of the same batch:
		 * over the run of AS_OK rows above wm, compacting them
		 * (LIVES: kept, for receipt_retention) */
		do
		:: WM(lv) < NS && rx[IX(lv, WM(lv) + 1)] == RX_OK ->
			WM(lv)++;
#ifndef LIVES
			rx[wm] = RX_NONE;
			need[wm] = 0;
			got[wm] = 0
#else
			skip
#endif
		:: else -> break
		od;
		printf("D: 810-Response %d (bit %d): row %d, wm %d\n", s, cbit,
		       rx[IX(lv, s)], WM(lv))
	:: else -> skip /* AS_OK already, or compacted: declined */
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
		/* on_query, store_lookup_received */
		if
		:: rx[IX(lv, s)] != RX_NONE && DIFF(IX(lv, s), cv) -> d_high(lv, s);
			PUSH(q_dr, n_dr, FRAME(F_QRC, lv, s, cv, hi));
			printf("D: query %d (content %d): CONFLICT\n", s, cv);
			hi = 0
		:: (rx[IX(lv, s)] != RX_NONE && !DIFF(IX(lv, s), cv)) ||
		   (rx[IX(lv, s)] == RX_NONE && s <= WM(lv)) ->
#ifdef LIVES
			assert(rx[IX(lv, s)] != RX_NONE); /* rows are kept */
#endif
			PUSH(q_dr, n_dr, FRAME(F_QR1, lv, s, cv, 0));
			printf("D: query %d: received\n", s)
		:: rx[IX(lv, s)] == RX_NONE && s > WM(lv) ->
			PUSH(q_dr, n_dr, FRAME(F_QR0, lv, s, cv, 0));
			printf("D: query %d: not received\n", s)
		fi
	:: else -> assert(false)
	fi
}

#ifdef BROKEN_ACK_BEFORE_COMMIT
#define D_COMMIT(v)                                                            \
	:: d_step { pend[v] != 0 -> d_record(0, v, v, pend[v]); pend[v] = 0;   \
		d_tick() }
#else
#define D_COMMIT(v)
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
#define O_DUE(v) (up_or && IN_DOUBT(v))
#define R_DUE(v) (up_rd && cp[v] == CP_SEND)
#if defined(LIVES) && !defined(BROKEN_RETRACT_ONCE)
/* R repeats the refusal of a copy it holds for its origin (as D repeats
 * an indication): a copy the origin renumbered goes once the origin hears
 * of it again, whatever was lost (proto.c at 88517c5 does not: a lost
 * 810-Response leaves the copy held for good, BROKEN_RETRACT_ONCE) */
#define R_HELD_DUE(v) (up_or && cp[v] == CP_HELD)
inline r_repeat_held(v)
{
	lv = (v) / (NS + 1);
	s = (v) % (NS + 1);
	R_HIGH;
	PUSH(q_ro, n_ro, FRAME(F_CONF, lv, s, CPC(v), hi));
	printf("R: copy %d held: its refusal again to O\n", v);
	hi = 0;
	lv = 0;
	s = 0
}
#else
#define R_HELD_DUE(v) false
#define r_repeat_held(v) skip
#endif
#define D_DUE(v) (held[v] != 0 || (up_rd && rx[v] == RX_INIT))
#ifdef LIVES
#define O_DUE2(ll, v) O_DUE(v)
#define RD_DUE2(ll, v)                                                         \
	(R_DUE(IX(ll, v)) || R_HELD_DUE(IX(ll, v)) || D_DUE(IX(ll, v)))
#define ANY_DUE (O_SEQS(O_DUE2, ||) || SLOTS(RD_DUE2, ||))
#else
#define DUE(v) (O_DUE(v) || R_DUE(v) || D_DUE(v))
#define ANY_DUE ANY(DUE)
#endif

inline tick()
{
	printf("CLOCK: query_after\n");
	s = 1;
	do
	:: s <= NS ->
		if
		:: O_DUE(s) -> O_TIMER(s)
		:: else -> skip
		fi;
		s++
	:: else -> break
	od;
	j = 1;
	do
	:: j < NX ->
		if
		:: R_DUE(j) -> PUSH(q_rd, n_rd, FRAME(F_QUERY, j / (NS + 1),
				j % (NS + 1), CPC(j), 0));
			printf("R: query copy %d\n", j)
		:: R_HELD_DUE(j) -> r_repeat_held(j)
		:: else -> skip
		fi;
		if
		:: held[j] != 0 -> held[j] = 0;
#ifdef LIVES
			heldf[j] = 0;
#endif
			printf("D: held %d dropped\n", j)
		:: else -> skip
		fi;
		if
		:: up_rd && rx[j] == RX_INIT ->
			PUSH(q_dr, n_dr, FRAME(F_IND, j / (NS + 1), j % (NS + 1),
				RXC(j), 0));
			printf("D: repeat 810-Indication %d\n", j)
		:: else -> skip
		fi;
		j++
	:: else -> break
	od;
	j = 0;
	s = 0;
	O_TIMER_END
}
/* Nothing can happen any more: nothing in flight, no timer due, both
 * connections up, no fault left that could strike (LIVES: the application
 * has enqueued all, no restore or re-image left). Then the clock idles: the
 * end of a run is a cycle, which the liveness search sees under weak
 * fairness. (Spin's stutter extension of a run that stops is not checked
 * with -f for claims like "<> [] p": without this step a run that stops in
 * a bad state would pass.) */
#ifdef LIVES
#define IDLE_LIVES && quota == 0 && restores == 0 && reimages == 0
#else
#define IDLE_LIVES
#endif
#define IDLE                                                                   \
	(QUIET && !ANY_DUE && up_or && up_rd && drops == 0 && crashes == 0     \
	 IDLE_LIVES)

proctype Clock()
{
end:
	do
	:: d_step { QUIET && ANY_DUE -> tick() }
	:: IDLE -> skip
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
	:: j < NX ->
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
	:: s <= NS ->
		if
		:: IN_DOUBT(s) ->
			PUSH(q_or, n_or, FRAME(F_QUERY, olife, s, OC(s), 0))
		:: else -> skip
		fi;
		s++
	:: else -> break
	od;
	s = 0;
	o_tick();
	/* R's side: the refusals of the copies it holds */
	j = 1;
	do
	:: j < NX ->
		if
		:: R_HELD_DUE(j) -> r_repeat_held(j)
		:: else -> skip
		fi;
		j++
	:: else -> break
	od;
	j = 0
}

/* PEER_UP on both ends of R-D: R queries its copies in 4 and its tick sends
 * those in 0 (an older life's first); D repeats the indication of every
 * AS_INIT row. */
inline up_r_d()
{
	up_rd = 1;
	printf("ENV: R-D up\n");
	j = 1;
	do
	:: j < NX ->
		if
		:: cp[j] == CP_SEND ->
			PUSH(q_rd, n_rd, FRAME(F_QUERY, j / (NS + 1), j % (NS + 1),
				CPC(j), 0))
		:: else -> skip
		fi;
		if
		:: rx[j] == RX_INIT ->
			PUSH(q_dr, n_dr, FRAME(F_IND, j / (NS + 1), j % (NS + 1),
				RXC(j), 0))
		:: else -> skip
		fi;
		j++
	:: else -> break
	od;
	j = 1;
	do
	:: j < NX ->
		if
		:: cp[j] == CP_UNSEND -> cp[j] = CP_SEND;
			PUSH(q_rd, n_rd, CP_FRAME(j));
			printf("R: copy %d sent, status 4\n", j)
		:: else -> skip
		fi;
		j++
	:: else -> break
	od;
	j = 0
}

inline d_lose_volatile()
{
	j = 1;
	do
	:: j < NX ->
		held[j] = 0;
#ifdef LIVES
		heldf[j] = 0;
#endif
#ifdef BROKEN_ACK_BEFORE_COMMIT
		pend[j] = 0;
#endif
		j++
	:: else -> break
	od;
	j = 0
}

#ifdef LIVES
/* The application enqueues a message: a new content, the next seq of the
 * counter, the key's last row as its predecessor; the daemon is woken. */
inline enqueue()
{
	quota--;
	nextc++;
	assert(nextc <= NC);
	kv = ctr;
	do
	:: kv > 0 && !ROW(kv) -> kv--
	:: else -> break
	od;
	prevc[nextc] = oc[kv]; /* oc[0] is 0 */
	assert(ctr < NS);     /* MAXSEQ too small */
	ctr++;
	oc[ctr] = nextc;
	ost[ctr] = SS_UNSEND;
	g_app = g_app | (1 << nextc);
	upd_must();
	printf("APP: content %d enqueued: %d:%d, prev content %d\n", nextc,
	       olife, ctr, prevc[nextc]);
	kv = 0;
	o_tick()
}

/* g_app: the contents of O's rows */
inline o_contents()
{
	g_app = 0;
	kv = 1;
	do
	:: kv <= NS ->
		if
		:: ROW(kv) -> g_app = g_app | (1 << oc[kv])
		:: else -> skip
		fi;
		kv++
	:: else -> break
	od;
	kv = 0;
	upd_must()
}

/* The snapshot a restore puts back: O's durable state now. */
inline snapshot()
{
	snapped = 1;
	s_life = olife;
	s_ctr = ctr;
	kv = 1;
	do
	:: kv <= NS -> s_ost[kv] = ost[kv]; s_oc[kv] = oc[kv]; kv++
	:: else -> break
	od;
	kv = 0;
	printf("ENV: snapshot of O (life %d, counter %d)\n", olife, ctr)
}

/* O stopped, its database put back from the snapshot, O started: its
 * connection is cut; the application enqueues NNEW new messages. */
inline restore()
{
	restores--;
	down_or();
	olife = s_life;
	ctr = s_ctr;
	kv = 1;
	do
	:: kv <= NS -> ost[kv] = s_ost[kv]; oc[kv] = s_oc[kv];
		s_ost[kv] = 0; s_oc[kv] = 0; kv++
	:: else -> break
	od;
	kv = 0;
	snapped = 0;
	s_life = 0;
	s_ctr = 0;
	quota = NNEW;
	o_contents();
	printf("ENV: O restored (life %d, counter %d)\n", olife, ctr)
}

/* O re-imaged: an empty database, a new life, counter 0. */
inline reimage()
{
	reimages--;
	down_or();
	assert(olife + 1 < NLIFE); /* NLIFE too small */
	olife++;
	ctr = 0;
	kv = 1;
	do
	:: kv <= NS -> ost[kv] = 0; oc[kv] = 0; kv++
	:: else -> break
	od;
	kv = 0;
	quota = NNEW;
	o_contents();
	printf("ENV: O re-imaged: life %d\n", olife)
}
#endif

/* Reordering: the frame at the head is overtaken by the k behind it. */
#define DELAY(q, n, kk)                                                        \
	:: d_step { reorders > 0 && n > kk -> reorders--;                      \
		f = q[0];                                                      \
		i = 0;                                                         \
		do                                                             \
		:: i < kk -> q[i] = q[i + 1]; i++                              \
		:: else -> break                                               \
		od;                                                            \
		q[kk] = f;                                                     \
		i = 0;                                                         \
		DECODE;                                                        \
		printf("ENV: %e %d overtaken by %d frames\n", KIND, s, kk) }

/* Faults on the frame at the head of a queue (any frame gets there). */
#define FAULTS(q, n)                                                           \
	:: d_step { losses > 0 && n > 0 -> losses--; POP(q, n);                \
		printf("ENV: lost %e %d\n", KIND, s) }                         \
	:: d_step { dups > 0 && n > 0 && n < QLEN -> dups--;                   \
		i = n;                                                         \
		do                                                             \
		:: i > 1 -> q[i] = q[i - 1]; i--                               \
		:: else -> break                                               \
		od;                                                            \
		q[1] = q[0];                                                   \
		n++;                                                           \
		i = 0;                                                         \
		f = q[0];                                                      \
		DECODE;                                                        \
		printf("ENV: duplicated %e %d\n", KIND, s) }                   \
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
#ifdef LIVES
	:: d_step { quota > 0 -> enqueue() }
	:: d_step { restores > 0 && !snapped -> snapshot() }
	:: d_step { restores > 0 && snapped -> restore() }
	:: d_step { reimages > 0 -> reimage() }
#endif
	FAULTS(q_or, n_or)
	FAULTS(q_ro, n_ro)
	FAULTS(q_rd, n_rd)
	FAULTS(q_dr, n_dr)
	od
}

/* ---- start ------------------------------------------------------------- */

/*
 * The fault budgets are the macros above, or what SEMQ_LOSS, SEMQ_DUPS,
 * SEMQ_REORDER, SEMQ_DROPS, SEMQ_CRASHES, SEMQ_EARLY (and with LIVES
 * SEMQ_RESTORES, SEMQ_REIMAGES) say when pan runs (so that one compiled
 * verifier serves every budget; a replay with spin -t needs the same values
 * as -D macros). With LIVES the application enqueues NSEQ messages: all at
 * once before anything when no restore may come, else one by one (a
 * snapshot may come between). Then the nodes start.
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
#ifdef LIVES
	c_code {
		char *e;
		if ((e = getenv("SEMQ_RESTORES")) != NULL) now.restores = atoi(e);
		if ((e = getenv("SEMQ_REIMAGES")) != NULL) now.reimages = atoi(e);
	};
	d_step {
		quota = NSEQ;
		if
		:: restores == 0 ->
			do
			:: quota > 0 -> enqueue()
			:: else -> break
			od
		:: else -> skip
		fi
	};
#endif
	atomic {
		run Origin();
		run Relay();
		run Receiver();
		run Clock();
		run Env()
	}
}
