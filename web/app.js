// SPDX-License-Identifier: MIT
/*
 * The semqd dashboard's script (see index.html): every 2 s it reads the
 * admin endpoints (/health, /peers, /streams, /redo?status=...&offset=...,
 * /redo?status=dead&group_by=error) and redraws the header, the reasons
 * that need attention and the tables; its buttons post the redo actions
 * (/redo/ID/retry, /redo/ID/discard, /redo/retry-all-dead, and for a group
 * of dead letters /redo/retry and /redo/discard, a dry run first).
 *
 * DESIGN
 *  - Every value from the node reaches the page through textContent or an
 *    attribute set with setAttribute/dataset: never through innerHTML, so a
 *    key or an error text holding markup is shown as text.
 *  - One refresh at a time: a refresh asked for while one runs is done
 *    once more after it, and the 2 s timer is armed only after a refresh
 *    ends, so a slow node is never sent a pile of requests.
 *  - The admin token: with [node] admin_token set, the node answers every
 *    request but /health (and these files) only with `Authorization:
 *    Bearer TOKEN`, reads too. Every request sends the token kept in
 *    sessionStorage (this tab only). A read refused with 401 asks for the
 *    token with prompt() between two refreshes, once (Cancel stops asking
 *    until the page is loaded again); an action that gets 401 asks and
 *    tries once more. A token that worked is kept, one that was refused is
 *    forgotten.
 *  - A redraw keeps the keyboard focus: the focused button is found again
 *    by its data-focus-key after its table was rebuilt.
 */
'use strict';

(function () {
	const REFRESH_MS = 2000;
	const PAGE = 50; /* redo entries a page */
	const TOKEN_KEY = 'semq.admin_token';

	let timer = null;
	let refreshing = false;
	let refreshAgain = false;
	let busy = false; /* an action is in flight */
	let clockOffset = 0; /* node's clock minus ours, ms */
	let tokenDeclined = false; /* Cancel on the token prompt of a read */
	let stuckDests = new Map(); /* dest -> its backlog_old reason */
	let nodeId = null; /* this node's id, from /health */
	let redoOffset = 0; /* the first entry of the redo page shown */
	let redoTotal = 0;

	function $(id) {
		return document.getElementById(id);
	}

	/* ---- formatting --------------------------------------------------- */

	function nodeNow() {
		return Date.now() + clockOffset;
	}

	function duration(ms) {
		if (typeof ms !== 'number' || !isFinite(ms))
			return '—';
		let s = Math.max(0, Math.floor(ms / 1000));
		if (s < 60)
			return s + ' s';
		let m = Math.floor(s / 60);
		s %= 60;
		if (m < 60)
			return m + ' min ' + s + ' s';
		let h = Math.floor(m / 60);
		m %= 60;
		if (h < 24)
			return h + ' h ' + m + ' min';
		const d = Math.floor(h / 24);
		h %= 24;
		return d + ' d ' + h + ' h';
	}

	function two(n) {
		return (n < 10 ? '0' : '') + n;
	}

	/* A unix ms time as local "YYYY-MM-DD HH:MM:SS". */
	function timestamp(ms) {
		const d = new Date(ms);
		return d.getFullYear() + '-' + two(d.getMonth() + 1) + '-' +
			two(d.getDate()) + ' ' + two(d.getHours()) + ':' +
			two(d.getMinutes()) + ':' + two(d.getSeconds());
	}

	/* ---- building the page (text only) -------------------------------- */

	function cell(tr, value, cls) {
		const td = document.createElement('td');
		if (value === null || value === undefined || value === '') {
			td.textContent = '—';
			td.classList.add('muted');
		} else {
			td.textContent = String(value);
		}
		if (cls)
			td.classList.add(cls);
		tr.appendChild(td);
		return td;
	}

	function badge(td, text, kind) {
		const span = document.createElement('span');
		span.className = 'badge badge-' + kind;
		span.textContent = text;
		td.textContent = '';
		td.classList.remove('muted');
		td.appendChild(span);
	}

	function emptyRow(tbody, columns, text) {
		const tr = document.createElement('tr');
		const td = cell(tr, text, 'empty');
		td.colSpan = columns;
		tbody.appendChild(tr);
	}

	/* Replaces tbody's rows with those fill() appends, keeping the focus
	 * on the button of the same data-focus-key. */
	function redraw(tbody, fill) {
		const active = document.activeElement;
		const key = active && tbody.contains(active) ?
			active.getAttribute('data-focus-key') : null;
		const fresh = document.createElement('tbody');
		fresh.id = tbody.id;
		fill(fresh);
		tbody.replaceWith(fresh);
		if (key === null)
			return;
		for (const b of fresh.querySelectorAll('[data-focus-key]')) {
			if (b.getAttribute('data-focus-key') === key) {
				b.focus();
				break;
			}
		}
	}

	/* ---- messages ------------------------------------------------------ */

	function say(text, kind) {
		const m = $('message');
		m.textContent = text;
		m.className = 'message message-' + kind;
		m.setAttribute('role', kind === 'error' ? 'alert' : 'status');
		m.hidden = false;
	}

	function refreshProblem(text) {
		const m = $('refresh-error');
		m.textContent = text || '';
		m.hidden = !text;
	}

	/* ---- the API ------------------------------------------------------- */

	class ApiError extends Error {
		constructor(status, text) {
			super(text);
			this.status = status;
		}
	}

	/* method path -> {status, doc}; throws ApiError with the node's
	 * {"error"} text. okStatuses: statuses whose JSON is an answer. */
	async function api(method, path, body, token, okStatuses) {
		const headers = {Accept: 'application/json'};
		const init = {method, headers, cache: 'no-store',
			      credentials: 'omit'};
		let res;
		let doc = null;

		/* The node takes actions only with this content type (a
		 * cross-site page cannot send it without a preflight). */
		if (method !== 'GET')
			headers['Content-Type'] = 'application/json';
		if (body !== undefined)
			init.body = JSON.stringify(body);
		if (token)
			headers.Authorization = 'Bearer ' + token;
		try {
			res = await fetch(path, init);
		} catch (e) {
			throw new ApiError(0, method + ' ' + path +
				': cannot reach the node (' + e.message + ')');
		}
		try {
			doc = await res.json();
		} catch (e) {
			doc = null;
		}
		if (!res.ok && !(okStatuses && okStatuses.includes(res.status))) {
			const why = doc && typeof doc.error === 'string' ?
				doc.error : 'HTTP ' + res.status;
			throw new ApiError(res.status, why);
		}
		if (doc === null || typeof doc !== 'object')
			throw new ApiError(res.status, method + ' ' + path +
				': the answer is not JSON');
		return {status: res.status, doc};
	}

	/* A GET with the admin token kept in this tab, if any. */
	function read(path, okStatuses) {
		return api('GET', path, undefined,
			   sessionStorage.getItem(TOKEN_KEY), okStatuses);
	}

	/* Reads were refused for want of the token (e401, an ApiError):
	 * asks for it once; true when there is a new one to try. */
	function askTokenForReads(e401) {
		sessionStorage.removeItem(TOKEN_KEY);
		if (tokenDeclined)
			return false;
		const token = window.prompt(
			'The node shows its state only with its admin token:\n' +
			e401.message + '\n\nAdmin token ([node] admin_token of ' +
			'this node):', '');
		if (token === null || token.trim() === '') {
			tokenDeclined = true;
			return false;
		}
		sessionStorage.setItem(TOKEN_KEY, token.trim());
		return true;
	}

	/* A POST that needs the admin token when the node has one. */
	async function action(path, body) {
		let token = sessionStorage.getItem(TOKEN_KEY);

		for (let attempt = 0; ; attempt++) {
			try {
				const r = await api('POST', path, body, token);
				if (token)
					sessionStorage.setItem(TOKEN_KEY, token);
				return r.doc;
			} catch (e) {
				if (!(e instanceof ApiError) || e.status !== 401)
					throw e;
				sessionStorage.removeItem(TOKEN_KEY);
				if (attempt > 0)
					throw e;
				token = window.prompt(
					'The node refused the action:\n' +
					e.message + '\n\nAdmin token ([node] ' +
					'admin_token of this node):', '');
				if (token === null || token.trim() === '')
					throw new ApiError(401, 'no admin ' +
						'token given: ' + e.message);
				token = token.trim();
			}
		}
	}

	/* ---- rendering ----------------------------------------------------- */

	function showHealth(r) {
		const d = r.doc;
		const h = $('health');
		const status = typeof d.status === 'string' ? d.status : '?';
		const reasons = Array.isArray(d.reasons) ? d.reasons : [];
		$('node-id').textContent = d.node || '?';
		nodeId = d.node || null;
		h.textContent = status;
		h.className = 'badge badge-' +
			(status === 'ready' ? 'ok' : r.status === 503 ? 'bad' :
			 'warn');
		$('uptime').textContent = duration((d.uptime_s || 0) * 1000);
		document.title = 'semqd ' + (d.node || '') + ' — ' + status;
		stuckDests = new Map();
		for (const x of reasons)
			if (x.reason === 'backlog_old' && typeof x.dest === 'string')
				stuckDests.set(x.dest, x);
		showProblems(reasons);
	}

	/* The reasons /health gives, first on the page: each as its code
	 * (a badge) and the node's own sentence. */
	function showProblems(reasons) {
		const list = $('problems-list');
		const fresh = document.createElement('ul');
		fresh.id = list.id;
		for (const x of reasons) {
			const li = document.createElement('li');
			li.dataset.reason = String(x.reason);
			const b = document.createElement('span');
			b.className = 'badge badge-' + (x.reason === 'plugin_stuck' ||
				x.reason === 'disk_full' ? 'bad' : 'warn');
			b.textContent = String(x.reason).replace(/_/g, ' ');
			li.appendChild(b);
			li.appendChild(document.createTextNode(' ' +
				(typeof x.text === 'string' ? x.text : '')));
			fresh.appendChild(li);
		}
		list.replaceWith(fresh);
		$('problems').hidden = reasons.length === 0;
	}

	function showUnreachable() {
		const h = $('health');
		h.textContent = 'unreachable';
		h.className = 'badge badge-bad';
		$('uptime').textContent = '—';
	}

	function showPeers(doc) {
		if (typeof doc.now === 'number')
			clockOffset = doc.now - Date.now();
		const peers = Array.isArray(doc.peers) ? doc.peers : [];
		redraw($('peers-body'), (tb) => {
			if (!peers.length)
				emptyRow(tb, 6, 'No peers configured or connected.');
			for (const p of peers) {
				const tr = document.createElement('tr');
				const down = typeof p.down_since === 'number';
				let state = p.state;
				tr.dataset.peer = p.peer === null ? '' : p.peer;
				cell(tr, p.peer === null ? '(not yet known)' : p.peer);
				if (down)
					state = 'down ' + duration(doc.now - p.down_since);
				if (p.state === 'disconnected' &&
				    typeof p.next_dial_in_ms === 'number')
					state += ' · next dial in ' +
						duration(p.next_dial_in_ms);
				badge(cell(tr, ''), state,
				      p.state === 'ready' ? 'ok' :
				      down || p.state === 'disconnected' ? 'bad' :
				      'warn');
				cell(tr, p.direction);
				cell(tr, p.address);
				const at = down ? p.down_since : p.since;
				const since = cell(tr, typeof at === 'number' ?
					duration(doc.now - at) + ' ago' : null);
				if (typeof at === 'number')
					since.title = timestamp(at);
				cell(tr, down ? p.last_error : null, 'error-text');
				tb.appendChild(tr);
			}
		});
	}

	function showStreams(doc) {
		if (typeof doc.now === 'number')
			clockOffset = doc.now - Date.now();
		const rows = [];
		let dead = 0;
		for (const s of doc.outbound || [])
			rows.push(['out', s]);
		for (const s of doc.inbound || []) {
			rows.push(['in', s]);
			if (s.redo && typeof s.redo.dead === 'number')
				dead += s.redo.dead;
		}
		const held = new Map(); /* dest -> [custody.waiting rows] */
		for (const w of (doc.custody || {}).waiting || []) {
			if (!held.has(w.dest))
				held.set(w.dest, []);
			held.get(w.dest).push(w);
		}
		redraw($('streams-body'), (tb) => {
			if (!rows.length)
				emptyRow(tb, 7, 'No messages yet.');
			for (const [dir, s] of rows) {
				const tr = document.createElement('tr');
				tr.dataset.direction = dir;
				cell(tr, dir === 'out' ? 'outbound' : 'inbound');
				cell(tr, s.origin);
				cell(tr, s.dest);
				cell(tr, s.depth, 'num');
				const age = cell(tr, typeof s.oldest_unconfirmed_age_ms ===
					'number' ? duration(s.oldest_unconfirmed_age_ms) :
					null);
				if (typeof s.oldest_unconfirmed_at === 'number')
					age.title = timestamp(s.oldest_unconfirmed_at);
				cell(tr, dir === 'in' ? s.confirmed_through : null,
				     'num');
				where(cell(tr, ''), dir, s, held.get(s.dest) || []);
				tb.appendChild(tr);
			}
		});
		showCustody(doc.custody || {});
		const all = $('retry-all-dead');
		all.textContent = 'Retry all dead (' + dead + ')';
		all.disabled = busy || dead === 0;
		all.dataset.dead = String(dead);
	}

	/* An outbound stream's unconfirmed documents: how many wait at which
	 * relay (its custody, since when) and how many here (a relay's own
	 * custody of another origin's stream: "held here"); "stuck" when
	 * /health names the stream's backlog as too old. */
	function where(td, dir, s, waiting) {
		td.textContent = '';
		td.classList.remove('muted');
		if (dir !== 'out' || !s.depth) {
			td.textContent = dir === 'out' ? 'all confirmed' : '—';
			td.classList.add('muted');
			return;
		}
		const stuck = stuckDests.get(s.dest);
		if (stuck) {
			const b = document.createElement('span');
			b.className = 'badge badge-bad';
			b.textContent = 'stuck ' + duration(stuck.age_s * 1000);
			td.appendChild(b);
			td.appendChild(document.createTextNode(' '));
		}
		const parts = [];
		let atRelays = 0;
		for (const w of waiting) {
			atRelays += w.messages;
			parts.push('waiting at ' + w.relay + ': ' + w.messages +
				   (typeof w.age_ms === 'number' ? ' for ' +
				    duration(w.age_ms) : ''));
		}
		if (s.depth > atRelays)
			parts.push((s.depth - atRelays) + (nodeId === null ||
				s.origin === nodeId ? ' here' :
				' held here for ' + s.origin));
		td.appendChild(document.createTextNode(parts.join(' · ')));
	}

	/* What this relay holds for others, and what relays hold of this
	 * node's messages (outside its window). */
	function showCustody(c) {
		const rows = [];
		for (const h of c.held || [])
			rows.push(['held here', h.origin, h.dest, '', h.messages,
				   h.bytes, h.oldest_age_ms, h.oldest_created_at]);
		for (const w of c.waiting || [])
			rows.push(['at a relay', '', w.dest, w.relay, w.messages,
				   null, w.age_ms, w.since]);
		redraw($('custody-body'), (tb) => {
			if (!rows.length)
				emptyRow(tb, 7, 'Nothing in custody.');
			for (const r of rows) {
				const tr = document.createElement('tr');
				cell(tr, r[0]);
				cell(tr, r[1], 'mono');
				cell(tr, r[2], 'mono');
				cell(tr, r[3], 'mono');
				cell(tr, r[4], 'num');
				cell(tr, r[5], 'num');
				const age = cell(tr, typeof r[6] === 'number' ?
					duration(r[6]) : null);
				if (typeof r[7] === 'number')
					age.title = timestamp(r[7]);
				tb.appendChild(tr);
			}
		});
		const q = c.quota;
		$('custody-quota').textContent = q && (c.held || []).length ?
			q.messages + ' of ' + q.quota_messages + ' messages, ' +
			q.bytes + ' of ' + q.quota_bytes + ' bytes held' : '';
	}

	function actionButton(td, label, kind, e) {
		const b = document.createElement('button');
		b.type = 'button';
		b.textContent = label;
		b.className = 'btn-' + kind;
		b.dataset.action = kind;
		b.dataset.id = String(e.id);
		b.setAttribute('data-focus-key', kind + '-' + e.id);
		b.setAttribute('aria-label', label + ' redo entry ' + e.id +
			       ' (' + e.message + ')');
		b.disabled = busy;
		b.addEventListener('click', () => {
			if (kind === 'retry')
				retry(e);
			else
				discard(e);
		});
		td.appendChild(b);
	}

	/* The dead letters grouped by their last error, the largest group
	 * first, each with bulk Retry and Discard. */
	function showGroups(doc) {
		const groups = Array.isArray(doc.groups) ? doc.groups.slice() : [];
		const now = nodeNow();
		groups.sort((a, b) => b.count - a.count);
		redraw($('groups-body'), (tb) => {
			if (!groups.length)
				emptyRow(tb, 6, 'No dead letters.');
			groups.forEach((g, i) => {
				const tr = document.createElement('tr');
				tr.dataset.group = String(i);
				cell(tr, g.count, 'num');
				const err = cell(tr, g.error, 'error-text');
				if (g.error)
					err.title = g.error;
				cell(tr, (g.dests || []).join(', '), 'mono');
				for (const at of [g.oldest, g.newest]) {
					const td = cell(tr, typeof at === 'number' ?
						duration(now - at) + ' ago' : null);
					if (typeof at === 'number')
						td.title = timestamp(at);
				}
				const acts = cell(tr, '', 'actions');
				acts.classList.remove('muted');
				acts.textContent = '';
				if (typeof g.error === 'string') {
					groupButton(acts, 'Retry', 'retry', g, i);
					groupButton(acts, 'Discard', 'discard', g, i);
				}
				tb.appendChild(tr);
			});
		});
	}

	function groupButton(td, label, kind, g, i) {
		const b = document.createElement('button');
		b.type = 'button';
		b.textContent = label;
		b.className = 'btn-' + kind;
		b.dataset.groupAction = kind;
		b.dataset.group = String(i);
		b.setAttribute('data-focus-key', 'group-' + kind + '-' + i);
		b.setAttribute('aria-label', label + ' the ' + g.count +
			       ' dead entries with the error ' + g.error);
		b.disabled = busy;
		b.addEventListener('click', () => bulk(kind, g));
		td.appendChild(b);
	}

	const STATUS_KIND = {pending: 'warn', waiting: 'warn', done: 'ok',
			     dead: 'bad', discarded: 'muted'};

	/* The Status filter's choices: "all" and the statuses the node names
	 * in its answer (doc.statuses, the node's one table of names), kept
	 * as they are while the list is the same. */
	function statusOptions(doc) {
		const sel = $('redo-status');
		if (!Array.isArray(doc.statuses))
			return;
		const want = ['all'].concat(doc.statuses.filter((x) =>
			typeof x === 'string'));
		const have = Array.from(sel.options, (o) => o.value);
		if (want.join('\n') === have.join('\n'))
			return;
		const keep = sel.value;
		sel.textContent = '';
		for (const name of want) {
			const o = document.createElement('option');
			o.value = name;
			o.textContent = name;
			sel.appendChild(o);
		}
		sel.value = want.includes(keep) ? keep : 'all';
	}

	function showRedo(doc) {
		statusOptions(doc);
		const entries = Array.isArray(doc.entries) ? doc.entries : [];
		const now = nodeNow();
		redraw($('redo-body'), (tb) => {
			if (!entries.length)
				emptyRow(tb, 8, doc.status === 'all' ?
					'The redo queue is empty.' :
					'No ' + doc.status + ' entries.');
			for (const e of entries) {
				const tr = document.createElement('tr');
				tr.dataset.id = String(e.id);
				tr.dataset.status = e.status_name;
				cell(tr, e.id, 'num');
				cell(tr, e.message, 'mono');
				cell(tr, e.key, 'mono');
				badge(cell(tr, ''), e.status_name,
				      STATUS_KIND[e.status_name] || 'warn');
				cell(tr, e.tries, 'num');
				let next = null;
				if (e.status_name === 'pending' ||
				    e.status_name === 'waiting')
					next = e.next_attempt_at <= now ? 'due' :
						'in ' + duration(e.next_attempt_at - now);
				const n = cell(tr, next);
				if (next !== null)
					n.title = timestamp(e.next_attempt_at);
				const err = cell(tr, e.status_name === 'discarded' &&
					e.discard_reason ? 'discarded: ' +
					e.discard_reason : e.behind ? e.behind.text :
					e.last_error, 'error-text');
				if (e.last_error)
					err.title = e.last_error;
				const acts = cell(tr, '', 'actions');
				acts.classList.remove('muted');
				acts.textContent = '';
				if (e.status_name === 'dead') {
					actionButton(acts, 'Retry', 'retry', e);
					actionButton(acts, 'Discard', 'discard', e);
				}
				tb.appendChild(tr);
			}
		});
		const total = typeof doc.total === 'number' ? doc.total :
			entries.length;
		const first = typeof doc.offset === 'number' ? doc.offset : 0;
		redoTotal = total;
		$('redo-count').textContent = !entries.length ? '' :
			total > entries.length ? 'entries ' + (first + 1) + '–' +
			(first + entries.length) + ' of ' + total +
			(doc.status === 'all' ? ', dead first' : '') :
			total + (total === 1 ? ' entry' : ' entries');
		$('redo-prev').disabled = busy || first === 0;
		$('redo-next').disabled = busy ||
			first + entries.length >= total;
	}

	/* ---- refreshing ---------------------------------------------------- */

	async function refreshOnce() {
		const status = $('redo-status').value;
		const [health, peers, streams, redo, groups] =
			await Promise.allSettled([
				api('GET', '/health', undefined, null, [503]),
				read('/peers'),
				read('/streams'),
				read('/redo?status=' + encodeURIComponent(status) +
				     '&order=dead_first&limit=' + PAGE +
				     '&offset=' + redoOffset),
				read('/redo?status=dead&group_by=error'),
			]);
		const problems = [];
		const refused = [peers, streams, redo, groups].find((r) =>
			r.status === 'rejected' &&
			r.reason instanceof ApiError && r.reason.status === 401);

		if (refused && askTokenForReads(refused.reason)) {
			refreshAgain = true;
			return;
		}

		if (health.status === 'fulfilled') {
			showHealth(health.value);
		} else {
			showUnreachable();
			problems.push('/health: ' + health.reason.message);
		}
		if (peers.status === 'fulfilled')
			showPeers(peers.value.doc);
		else
			problems.push('/peers: ' + peers.reason.message);
		if (streams.status === 'fulfilled')
			showStreams(streams.value.doc);
		else
			problems.push('/streams: ' + streams.reason.message);
		if (redo.status === 'fulfilled')
			showRedo(redo.value.doc);
		else
			problems.push('/redo: ' + redo.reason.message);
		if (groups.status === 'fulfilled')
			showGroups(groups.value.doc);
		else
			problems.push('/redo?group_by=error: ' +
				      groups.reason.message);
		if (refused && tokenDeclined)
			problems.push('no admin token given: reload the page to ' +
				      'enter it');
		refreshProblem(problems.length ? 'Refreshing failed — ' +
			problems.join('; ') : '');
		$('updated').textContent = timestamp(Date.now()).slice(11);
	}

	async function refresh() {
		if (refreshing) {
			refreshAgain = true;
			return;
		}
		refreshing = true;
		clearTimeout(timer);
		try {
			do {
				refreshAgain = false;
				await refreshOnce();
			} while (refreshAgain);
		} catch (e) {
			refreshProblem('Refreshing failed — ' + e.message);
		} finally {
			refreshing = false;
			timer = setTimeout(refresh, REFRESH_MS);
		}
	}

	/* ---- actions ------------------------------------------------------- */

	function setBusy(on) {
		busy = on;
		for (const b of document.querySelectorAll(
			'#redo-body button, #groups-body button'))
			b.disabled = on;
		if (on) {
			$('redo-prev').disabled = true;
			$('redo-next').disabled = true;
		}
		const all = $('retry-all-dead');
		all.disabled = on || all.dataset.dead === '0';
	}

	async function run(what, fn) {
		if (busy)
			return;
		setBusy(true);
		try {
			say(await fn(), 'ok');
		} catch (e) {
			say(what + ' failed: ' + e.message, 'error');
		} finally {
			setBusy(false);
			refresh();
		}
	}

	function retry(e) {
		run('Retry of redo entry ' + e.id, async () => {
			await action('/redo/' + encodeURIComponent(e.id) +
				     '/retry');
			return 'Redo entry ' + e.id + ' (' + e.message +
				') retried: it runs again now.';
		});
	}

	function discard(e) {
		const reason = window.prompt('Discard redo entry ' + e.id +
			' (' + e.message + ', key ' + (e.key === null ? 'none' :
			e.key) + ')?\nThe message will not be processed. ' +
			'Reason (recorded with the entry):', '');
		if (reason === null) {
			say('Discard of redo entry ' + e.id + ' cancelled.', 'ok');
			return;
		}
		if (reason.trim() === '') {
			say('Discard of redo entry ' + e.id + ' needs a reason; ' +
			    'nothing was changed.', 'error');
			return;
		}
		run('Discard of redo entry ' + e.id, async () => {
			await action('/redo/' + encodeURIComponent(e.id) +
				     '/discard', {reason: reason.trim()});
			return 'Redo entry ' + e.id + ' (' + e.message +
				') discarded: ' + reason.trim();
		});
	}

	/* A group's Retry or Discard: a dry run first, which says how many
	 * entries (and which) the action touches; after the operator's yes the
	 * same filter runs for real, and the page says how many changed. */
	function bulk(kind, g) {
		/* the node matches an error of up to 255 bytes exactly; a
		 * longer one by its start (the dry run shows what matches) */
		const exact = new TextEncoder().encode(g.error).length <= 255;
		const filter = {where: exact ? 'error=' + g.error :
				'error~' + g.error.slice(0, 60), status: 'dead'};
		const path = '/redo/' + kind;
		run((kind === 'retry' ? 'Retry' : 'Discard') + ' of a group',
		    async () => {
			const dry = await action(path, Object.assign(
				{dry_run: true}, filter, kind === 'discard' ?
				{reason: 'dry run'} : {}));
			const ids = (dry.entries || []).map((e) => e.id);
			let reason;
			if (!dry.count)
				return 'No dead entry has that error any more.';
			const what = dry.count + ' dead ' + (dry.count === 1 ?
				'entry' : 'entries') + ' with the error "' +
				g.error + '" (ids ' + ids.slice(0, 20).join(', ') +
				(ids.length > 20 ? ', …' : '') + ')';
			if (kind === 'retry') {
				if (!window.confirm('Retry ' + what + '?'))
					return 'Retry cancelled; nothing was changed.';
			} else {
				reason = window.prompt('Discard ' + what + '?\n' +
					'They will not be processed. Reason ' +
					'(recorded with each entry):', '');
				if (reason === null || reason.trim() === '')
					return 'Discard cancelled (no reason); ' +
						'nothing was changed.';
			}
			const done = await action(path, Object.assign(
				{}, filter, kind === 'discard' ?
				{reason: reason.trim()} : {}));
			return done.count + ' dead ' + (done.count === 1 ?
				'entry' : 'entries') + (kind === 'retry' ?
				' retried: they run again now.' :
				' discarded: ' + reason.trim());
		});
	}

	function page(delta) {
		redoOffset = Math.max(0, Math.min(redoOffset + delta * PAGE,
			Math.max(0, redoTotal - 1)));
		refresh();
	}

	function retryAllDead() {
		const n = $('retry-all-dead').dataset.dead;
		if (!window.confirm('Retry every dead redo entry (' + n + ')?'))
			return;
		run('Retry of every dead entry', async () => {
			const d = await action('/redo/retry-all-dead');
			return d.retried + ' dead ' + (d.retried === 1 ?
				'entry' : 'entries') + ' retried.';
		});
	}

	document.addEventListener('DOMContentLoaded', () => {
		$('redo-status').addEventListener('change', () => {
			redoOffset = 0;
			refresh();
		});
		$('redo-prev').addEventListener('click', () => page(-1));
		$('redo-next').addEventListener('click', () => page(1));
		$('retry-all-dead').addEventListener('click', retryAllDead);
		refresh();
	});
})();
