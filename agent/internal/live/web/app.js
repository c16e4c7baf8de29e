// Lakeside live view.
//
// Renders every source table from the /api/v1/stream WebSocket (protocol:
// agent/live/protocol.go) and polls /api/v1/status for the header. No
// dependencies, no build step, no network beyond the agent.
//
// Data flow: a message is applied to a normalised store at once (per table:
// rows by key + sorted ids); the keys it touched are marked dirty, and one
// requestAnimationFrame callback renders the dirty rows only. Row elements
// are kept in a map by key; a new row is put at its sorted position found by
// binary search.
'use strict';

(() => {
  const HIGHLIGHT_MS = 2000;      // a changed row stays highlighted this long
  const STATUS_EVERY_MS = 2000;   // /api/v1/status poll period
  const CHART_MS = 10 * 60 * 1000; // the charts show the last 10 minutes
  const CATCH_UP_BYTES = 1 << 20;  // WAL not yet received: catching up (as the source says)
  const BACKOFF_MIN_MS = 500;     // first reconnect delay, doubled per attempt
  const BACKOFF_MAX_MS = 30000;
  const HELLO_TIMEOUT_MS = 15000; // a socket that says nothing is dropped
  const BULK_INSERTS = 200;       // above this many new rows a frame re-lays the table
  const CHUNK_ROWS = 100;         // rows per chunk element (split at twice that)

  const params = new URLSearchParams(location.search);
  const token = params.get('token');         // passed on to the API
  const tablesParam = params.get('tables');  // optional filter, passed on

  const $ = (id) => document.getElementById(id);
  const ui = {
    conn: $('conn'), connText: $('conn-text'), alert: $('alert'),
    capture: $('capture'), captureText: $('capture-text'), replica: $('replica'), replicaText: $('replica-text'),
    lagChart: $('lag-chart'), lagNow: $('lag-now'), rateChart: $('rate-chart'), rateNow: $('rate-now'),
    versions: $('versions'),
    statusNote: $('status-note'), tables: $('tables'), toc: $('toc'), offset: $('offset'),
  };
  const nf = new Intl.NumberFormat('en');

  // ---------------------------------------------------------------- store

  /** @type {Map<string, Table>} tables by qualified name, in hello order */
  const tables = new Map();
  let lastOffset = null; // offset of the last message fully applied
  let nextTableId = 0;   // for element ids
  let shownOffset;       // what the footer shows (updated in the frame)

  // Table is the store and the view of one source table.
  class Table {
    constructor(info) {
      this.name = info.name;
      this.setInfo(info);
      this.rows = new Map();   // key -> values (entities)
      this.ids = [];           // keys, sorted by primary key
      this.sorted = true;      // false while a snapshot appends unsorted
      this.els = new Map();    // key -> row element
      this.dirty = new Map();  // key -> highlight?
      this.cleared = false;    // drop every rendered row next frame
      this.loaded = false;     // a complete snapshot was applied
      this.hl = new Map();     // key -> time highlighted
      this.buildView(nextTableId++);
    }

    setInfo(info) {
      this.info = info;
      this.cols = (info.columns || []).map((c) => c.name);
      this.keyCols = info.key || [];
      this.sig = JSON.stringify([info.columns, info.key]);
    }

    // cmp orders two keys present in rows: per key column, by value.
    cmp(ka, kb) {
      if (ka === kb) return 0;
      const a = this.rows.get(ka), b = this.rows.get(kb);
      for (const c of this.keyCols) {
        const r = cmpValue(a && a[c], b && b[c]);
        if (r) return r;
      }
      return cmpValue(ka, kb); // no key columns, or equal values: the key string
    }

    // lowerBound is the index of the first id not before key.
    lowerBound(key) {
      let lo = 0, hi = this.ids.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (this.cmp(this.ids[mid], key) < 0) lo = mid + 1; else hi = mid;
      }
      return lo;
    }

    ensureSorted() {
      if (!this.sorted) {
        this.ids.sort((a, b) => this.cmp(a, b));
        this.sorted = true;
      }
    }

    // upsert stores a row; bulk appends its id unsorted (snapshots).
    upsert(key, values, highlight, bulk) {
      if (!this.rows.has(key)) {
        this.rows.set(key, values);
        if (bulk) {
          this.ids.push(key);
          this.sorted = false;
        } else {
          this.ensureSorted();
          this.ids.splice(this.lowerBound(key), 0, key);
        }
      } else {
        this.rows.set(key, values);
      }
      this.markDirty(key, highlight);
    }

    remove(key) {
      if (!this.rows.has(key)) return;
      this.ensureSorted();
      let i = this.lowerBound(key);
      if (this.ids[i] !== key) i = this.ids.indexOf(key); // inconsistent values: be safe
      if (i >= 0) this.ids.splice(i, 1);
      this.rows.delete(key);
      this.markDirty(key, false);
    }

    clear() {
      this.rows.clear();
      this.ids = [];
      this.sorted = true;
      this.dirty.clear();
      this.hl.clear();
      this.cleared = true;
      this.loaded = false;
      schedule();
    }

    markDirty(key, highlight) {
      this.dirty.set(key, highlight || this.dirty.get(key) || false);
      schedule();
    }

    // apply applies one change of a transaction.
    apply(ch) {
      switch (ch.op) {
        case 'insert':
        case 'snapshot':
        case 'update': {
          let prev = this.rows.get(ch.key);
          if (ch.old_key && ch.old_key !== ch.key) {
            prev = prev || this.rows.get(ch.old_key);
            this.remove(ch.old_key);
          }
          // An update may leave out unchanged (TOASTed) columns: keep them.
          const values = ch.op === 'update' && prev ? Object.assign({}, prev, ch.row) : (ch.row || {});
          this.upsert(ch.key, values, true, false);
          break;
        }
        case 'delete':
          this.remove(ch.key);
          break;
        case 'truncate':
          this.clear();
          this.loaded = true;
          break;
        default:
          console.warn('lakeside: unknown op', ch.op);
      }
    }

    // ---- view

    buildView(index) {
      const id = 't' + index;
      const sec = el('section', 'tbl');
      sec.dataset.table = this.name;
      sec.id = id;
      sec.setAttribute('aria-labelledby', id + '-h');
      const h = el('h2');
      h.id = id + '-h';
      h.append(el('span', 'name', this.name), ' ');
      this.countEl = el('span', 'count', '');
      h.append(this.countEl);
      const scroll = el('div', 'scroll');
      scroll.tabIndex = 0; // scrollable by keyboard
      scroll.setAttribute('role', 'region');
      scroll.setAttribute('aria-label', this.name + ' rows');
      // An ARIA table of block rows, not a <table>: a changed cell then lays
      // out one row, and rows off screen are skipped (content-visibility),
      // where a 10,000-row <table> is laid out whole on every change.
      this.table = el('div', 'grid');
      this.table.setAttribute('role', 'table');
      this.table.setAttribute('aria-label', this.name);
      this.thead = el('div', 'head');
      this.thead.setAttribute('role', 'rowgroup');
      this.tbody = el('div', 'body');
      this.tbody.setAttribute('role', 'rowgroup');
      this.table.append(this.thead, this.tbody);
      this.emptyEl = el('p', 'empty', 'Loading snapshot…');
      scroll.append(this.table, this.emptyEl);
      sec.append(h, scroll);
      this.section = sec;
      const a = el('a', null, this.name);
      a.href = '#' + id;
      this.tocEl = el('li');
      this.tocEl.append(a);
      this.renderHead();
    }

    renderHead() {
      const tr = el('div', 'row');
      tr.setAttribute('role', 'row');
      this.kinds = [];
      const widths = [];
      for (const c of this.info.columns || []) {
        const kind = kindClass(c.type);
        const isKey = this.keyCols.includes(c.name);
        const th = el('div', 'cell ' + kind, c.name);
        th.setAttribute('role', 'columnheader');
        th.title = c.name + ' (' + c.type + ')' + (isKey ? ', primary key' : '');
        if (isKey) {
          th.classList.add('pk');
          const abbr = el('abbr', 'pk-badge', 'PK');
          abbr.title = 'primary key';
          th.append(' ', abbr);
        }
        tr.append(th);
        this.kinds.push(kind ? 'cell ' + kind : 'cell');
        widths.push(COLUMN_WIDTH[kind] || COLUMN_WIDTH.text);
      }
      // Every row is a grid with the same columns (CSSOM, allowed by the CSP).
      this.table.style.setProperty('--cols', widths.join(' ') || '1fr');
      this.thead.replaceChildren(tr);
    }

    // newRow makes the row element of a key.
    newRow(key) {
      const tr = document.createElement('div');
      tr.className = 'row';
      tr.setAttribute('role', 'row');
      tr.dataset.key = key;
      for (let i = 0; i < this.cols.length; i++) {
        const td = document.createElement('div');
        td.className = this.kinds[i];
        td.setAttribute('role', 'cell');
        tr.appendChild(td);
      }
      return tr;
    }

    // fillRow writes a row's cells, touching only the cells that changed.
    fillRow(tr, values) {
      const cells = tr.children;
      for (let i = 0; i < this.cols.length; i++) {
        const td = cells[i];
        const v = values[this.cols[i]];
        const text = v === null || v === undefined ? 'NULL' : formatValue(v);
        if (td.textContent !== text) {
          td.textContent = text;
          if (text.length > 24) td.title = text; else if (td.title) td.removeAttribute('title');
        }
        const isNull = v === null || v === undefined;
        if (isNull !== td.classList.contains('null')) td.classList.toggle('null', isNull);
      }
    }

    // flush renders the dirty rows; called once per animation frame.
    flush(now) {
      if (this.cleared) {
        this.tbody.textContent = '';
        this.els.clear();
        this.cleared = false;
      }
      if (this.dirty.size === 0) return this.renderCount();
      this.ensureSorted();
      const dirty = this.dirty;
      this.dirty = new Map();
      const inserts = [];
      for (const [key, highlight] of dirty) {
        const values = this.rows.get(key);
        let tr = this.els.get(key);
        if (values === undefined) { // deleted
          if (tr) { this.removeRow(tr); this.els.delete(key); }
          this.hl.delete(key);
          continue;
        }
        if (!tr) {
          tr = this.newRow(key);
          this.els.set(key, tr);
          inserts.push(key);
        }
        this.fillRow(tr, values);
        if (highlight) {
          tr.classList.add('changed');
          this.hl.set(key, now);
          highlights.push([this, key, now]);
        }
      }
      if (inserts.length > BULK_INSERTS && inserts.length * 4 > this.els.size) {
        // Many new rows (a snapshot): lay every row out in order in one go.
        const frag = document.createDocumentFragment();
        for (let i = 0; i < this.ids.length; i += CHUNK_ROWS) {
          const chunk = newChunk();
          for (const key of this.ids.slice(i, i + CHUNK_ROWS)) chunk.appendChild(this.els.get(key));
          frag.appendChild(chunk);
        }
        this.tbody.replaceChildren(frag);
      } else if (inserts.length) {
        // Insert from the last position down, so the next row is in place.
        const pos = inserts.map((key) => [this.lowerBound(key), key]).sort((a, b) => b[0] - a[0]);
        for (const [i, key] of pos) this.placeRow(this.els.get(key), i);
      }
      this.renderCount();
    }

    // Rows live in chunks of about CHUNK_ROWS: a chunk off screen is skipped
    // whole by style and layout (content-visibility), and a row put in or
    // taken out lays out one chunk, not thousands of siblings.
    placeRow(tr, i) {
      const next = i + 1 < this.ids.length ? this.els.get(this.ids[i + 1]) : null;
      let chunk;
      if (next && next.parentNode) {
        chunk = next.parentNode;
        chunk.insertBefore(tr, next);
      } else {
        chunk = this.tbody.lastElementChild;
        if (!chunk) chunk = this.tbody.appendChild(newChunk());
        chunk.appendChild(tr);
      }
      if (chunk.childElementCount > 2 * CHUNK_ROWS) {
        const rest = newChunk();
        rest.append(...Array.from(chunk.children).slice(CHUNK_ROWS));
        chunk.after(rest);
      }
    }

    removeRow(tr) {
      const chunk = tr.parentNode;
      tr.remove();
      if (chunk && !chunk.firstChild) chunk.remove();
    }

    renderCount() {
      const n = this.rows.size;
      if (n === this.shownCount && this.loaded === this.shownLoaded) return;
      this.shownCount = n;
      this.shownLoaded = this.loaded;
      this.countEl.textContent = nf.format(n) + (n === 1 ? ' row' : ' rows');
      this.emptyEl.hidden = n > 0;
      this.emptyEl.textContent = this.loaded ? 'No rows' : 'Loading snapshot…';
    }

    // unhighlight removes the highlight of a row changed at time at.
    unhighlight(key, at) {
      if (this.hl.get(key) !== at) return; // changed again since, or gone
      this.hl.delete(key);
      const tr = this.els.get(key);
      if (tr) tr.classList.remove('changed');
    }
  }

  // ---------------------------------------------------------------- values

  const DECIMAL = /^-?\d+(\.\d+)?$/;

  // cmpValue compares two key values: numbers (and numeric strings, which
  // is how int8 and numeric arrive) numerically, anything else lexically
  // by code unit; null and missing first. A truncated value compares by its
  // start (only a row keyed by all its columns has one in its key).
  function cmpValue(a, b) {
    if (isTruncated(a)) a = a.prefix;
    if (isTruncated(b)) b = b.prefix;
    if (a === b) return 0;
    if (a === null || a === undefined) return -1;
    if (b === null || b === undefined) return 1;
    if (typeof a === 'number' && typeof b === 'number') return a < b ? -1 : a > b ? 1 : 0;
    const sa = typeof a === 'object' ? JSON.stringify(a) : String(a);
    const sb = typeof b === 'object' ? JSON.stringify(b) : String(b);
    if (DECIMAL.test(sa) && DECIMAL.test(sb)) return cmpDecimal(sa, sb);
    return sa < sb ? -1 : sa > sb ? 1 : 0;
  }

  // cmpDecimal compares decimal strings exactly (no float rounding).
  function cmpDecimal(a, b) {
    const na = a[0] === '-', nb = b[0] === '-';
    if (na !== nb) return na ? -1 : 1;
    const r = cmpAbs(na ? a.slice(1) : a, nb ? b.slice(1) : b);
    return na ? -r : r;
  }

  function cmpAbs(a, b) {
    let [ia, fa = ''] = a.split('.');
    let [ib, fb = ''] = b.split('.');
    ia = ia.replace(/^0+(?=\d)/, '');
    ib = ib.replace(/^0+(?=\d)/, '');
    if (ia.length !== ib.length) return ia.length < ib.length ? -1 : 1;
    if (ia !== ib) return ia < ib ? -1 : 1;
    const n = Math.max(fa.length, fb.length);
    fa = fa.padEnd(n, '0');
    fb = fb.padEnd(n, '0');
    return fa < fb ? -1 : fa > fb ? 1 : 0;
  }

  // isTruncated tells a value the agent sent only the start of: an object
  // {truncated: true, bytes, prefix}, which no ordinary value is.
  function isTruncated(v) {
    return typeof v === 'object' && v !== null && !Array.isArray(v) && v.truncated === true;
  }

  // formatValue shows a value as received: exact strings stay exact. A
  // truncated value shows its start and the size of the whole value.
  function formatValue(v) {
    if (isTruncated(v)) return formatValue(v.prefix) + '… (' + nf.format(v.bytes) + ' bytes)';
    if (typeof v === 'string') return v;
    if (typeof v === 'number' || typeof v === 'boolean') return String(v);
    return JSON.stringify(v); // arrays, json
  }

  const NUMERIC_TYPES = new Set(['int2', 'int4', 'int8', 'smallint', 'integer', 'bigint',
    'numeric', 'decimal', 'float4', 'float8', 'real', 'double precision', 'money', 'oid']);

  // kindClass is the cell class of a PostgreSQL type: numbers align right.
  function kindClass(type) {
    const t = String(type || '').toLowerCase().replace(/\(.*$/, '');
    if (NUMERIC_TYPES.has(t)) return 'num';
    if (t.startsWith('timestamp') || t === 'date' || t === 'timestamptz') return 'ts';
    if (t === 'bool' || t === 'boolean') return 'bool';
    return '';
  }

  // Column widths by kind of type: numbers and times narrow, text wide.
  const COLUMN_WIDTH = {
    num: 'minmax(6rem, .6fr)', ts: 'minmax(17rem, 1fr)', bool: 'minmax(4.5rem, .4fr)', text: 'minmax(8rem, 2fr)',
  };

  function newChunk() {
    const c = el('div', 'chunk');
    c.setAttribute('role', 'none');
    return c;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function formatBytes(n) {
    if (!Number.isFinite(n)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(n) : n.toFixed(1)) + ' ' + units[i];
  }

  // ---------------------------------------------------------------- frames

  let framePending = false;
  const highlights = []; // [table, key, time] in time order
  let hlHead = 0;

  function schedule() {
    if (!framePending) {
      framePending = true;
      requestAnimationFrame(frame);
    }
  }

  function frame() {
    framePending = false;
    const now = performance.now();
    for (const t of tables.values()) t.flush(now);
    if (shownOffset !== lastOffset) {
      shownOffset = lastOffset;
      ui.offset.textContent = lastOffset || 'none';
    }
    ui.tables.setAttribute('aria-busy', String(![...tables.values()].every((t) => t.loaded)));
  }

  // Highlights end in a sweep, not one timer per row.
  setInterval(() => {
    const limit = performance.now() - HIGHLIGHT_MS;
    while (hlHead < highlights.length && highlights[hlHead][2] <= limit) {
      const [t, key, at] = highlights[hlHead++];
      t.unhighlight(key, at);
    }
    if (hlHead > 1024 && hlHead * 2 > highlights.length) {
      highlights.splice(0, hlHead);
      hlHead = 0;
    }
  }, 200);

  // ---------------------------------------------------------------- stream

  let conn = null;    // the current connection's state
  let attempt = 0;    // reconnect attempts since the last hello
  let retryTimer = 0;
  let forceFresh = false; // next connection starts over (after an error)

  function apiURL(path, extra) {
    const q = new URLSearchParams(extra);
    if (token) q.set('token', token);
    const s = q.toString();
    return path + (s ? '?' + s : '');
  }

  function connect() {
    retryTimer = 0;
    if (forceFresh) { lastOffset = null; forceFresh = false; }
    const q = {};
    if (tablesParam) q.tables = tablesParam;
    if (lastOffset) q.offset = lastOffset;
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(proto + '//' + location.host + apiURL('/api/v1/stream', q));
    const c = {
      ws,
      resumed: !!lastOffset, // sent an offset: changes follow, no snapshot
      snapStarted: new Set(), snapDone: new Set(), expectSnapshot: !lastOffset,
      helloTimer: setTimeout(() => ws.close(), HELLO_TIMEOUT_MS),
      closeNote: '',
    };
    conn = c;
    ws.onmessage = (e) => {
      if (conn !== c) return;
      let m;
      try { m = JSON.parse(e.data); } catch (err) { console.error('lakeside: bad message', err); return; }
      onMessage(c, m);
    };
    ws.onclose = (e) => {
      clearTimeout(c.helloTimer);
      if (conn !== c) return;
      conn = null;
      attempt++;
      let why = c.closeNote;
      if (e.code === 4008) why = 'the agent closed a slow client';
      else if (!why && e.reason) why = e.reason;
      if (e.code === 4000) forceFresh = true;
      setConn('reconnecting', 'Reconnecting (attempt ' + attempt + ')…', why);
      const delay = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** (attempt - 1)) * (0.8 + 0.4 * Math.random());
      retryTimer = setTimeout(connect, delay);
    };
  }

  // Retry at once when the machine comes back online.
  addEventListener('online', () => {
    if (retryTimer) { clearTimeout(retryTimer); connect(); }
  });

  function onMessage(c, m) {
    switch (m.type) {
      case 'hello': return onHello(c, m);
      case 'snapshot': return onSnapshot(c, m);
      case 'changes': return onChanges(c, m);
      case 'refetch': return onRefetch(c, m);
      case 'error':
        showAlert('The agent refused the stream: ' + m.message);
        c.closeNote = m.message;
        forceFresh = true; // a bad offset must not be sent again
        return;
      default:
        console.warn('lakeside: unknown message', m.type);
    }
  }

  function onHello(c, m) {
    clearTimeout(c.helloTimer);
    attempt = 0;
    hideAlert();
    setConn('connected', 'Connected', 'epoch ' + m.epoch);
    // Keep known tables whose schema is unchanged; rebuild the others.
    const seen = new Set();
    for (const info of m.tables || []) {
      seen.add(info.name);
      let t = tables.get(info.name);
      if (t && t.sig !== JSON.stringify([info.columns, info.key])) {
        t.setInfo(info);
        t.renderHead();
        t.tbody.textContent = '';
        t.els.clear();
        t.ids.forEach((k) => t.markDirty(k, false)); // re-render with the new columns
        t.sorted = false;
      }
      if (!t) {
        t = new Table(info);
        tables.set(info.name, t);
      }
    }
    for (const [name, t] of tables) {
      if (!seen.has(name)) { t.section.remove(); t.tocEl.remove(); tables.delete(name); }
    }
    // DOM order follows hello order.
    for (const info of m.tables || []) {
      const t = tables.get(info.name);
      ui.tables.appendChild(t.section);
      ui.toc.appendChild(t.tocEl);
    }
    ui.toc.hidden = tables.size < 2;
    schedule();
  }

  function onSnapshot(c, m) {
    const t = tables.get(m.table);
    if (!t) return;
    if (!c.snapStarted.has(m.table)) {
      c.snapStarted.add(m.table);
      t.clear(); // a snapshot replaces the table
    }
    for (const r of m.rows || []) t.upsert(r.key, r.values || {}, false, true);
    if (m.last) {
      c.snapDone.add(m.table);
      t.loaded = true;
      if ([...tables.keys()].every((n) => c.snapDone.has(n))) {
        c.expectSnapshot = false;
        lastOffset = m.offset;
      }
    }
  }

  function onChanges(c, m) {
    if (c.expectSnapshot) {
      // Changes after a snapshot that skipped a table: that table is empty.
      for (const [name, t] of tables) {
        if (!c.snapStarted.has(name)) { t.clear(); t.loaded = true; }
      }
      c.expectSnapshot = false;
    }
    for (const txn of m.txns || []) {
      for (const ch of txn.changes || []) {
        const t = tables.get(ch.table);
        if (t) t.apply(ch);
      }
    }
    lastOffset = m.offset;
    schedule();
  }

  function onRefetch(c, m) {
    for (const t of tables.values()) t.clear();
    lastOffset = null;
    c.expectSnapshot = true;
    c.snapStarted = new Set();
    c.snapDone = new Set();
    c.closeNote = 'resynchronising: ' + (m.reason || 'refetch');
  }

  function setConn(state, text, detail) {
    ui.conn.dataset.state = state;
    ui.tables.classList.toggle('stale', state !== 'connected'); // rows may be out of date
    ui.connText.textContent = text;
    ui.conn.title = detail || '';
  }

  function showAlert(text) {
    ui.alert.textContent = text;
    ui.alert.hidden = false;
  }

  function hideAlert() {
    ui.alert.hidden = true;
  }

  // ---------------------------------------------------------------- status

  async function pollStatus() {
    try {
      const r = await fetch(apiURL('/api/v1/status'), { cache: 'no-store', signal: AbortSignal.timeout(5000) });
      if (r.status === 401) showAlert('The agent needs a token: open this page as /?token=…');
      if (!r.ok) throw new Error('HTTP ' + r.status);
      renderStatus(await r.json());
      ui.statusNote.textContent = 'status updated ' + new Date().toLocaleTimeString();
      ui.statusNote.classList.remove('stale');
    } catch (err) {
      ui.statusNote.textContent = 'status unavailable (' + err.message + ')';
      ui.statusNote.classList.add('stale');
    }
    setTimeout(pollStatus, STATUS_EVERY_MS);
  }

  // The strip says the status in an operator's words: one sentence for
  // capture (PostgreSQL to the agent), one for the replica (the agent to
  // the bucket). The status carries no "since" for a backlog, so the page
  // dates it from the first poll that saw it ("or earlier" when that was
  // the page's first poll); offline_since and last_upload come from the
  // agent when it has them.
  const seen = new Map();  // condition -> {at, early}: when the page first saw it
  let polls = 0;           // successful status polls
  let prevChanges = null;  // {t, n}: the changes counter at the last poll
  let lastUploadSeen = null; // when the page saw upload.versions grow
  let prevVersions = null;
  const lagPoints = [];    // [time, lag bytes]
  const ratePoints = [];   // [time, changes per second]

  function renderStatus(st) {
    st = st || {};
    const now = Date.now();
    const first = polls++ === 0;
    // Changes per second, from the counter's growth since the last poll.
    let rate = null;
    const changes = num(st.changes);
    if (changes !== null) {
      if (prevChanges && changes >= prevChanges.n && now > prevChanges.t) {
        rate = (changes - prevChanges.n) * 1000 / (now - prevChanges.t);
      }
      prevChanges = { t: now, n: changes }; // a smaller count: the agent restarted
    } else {
      prevChanges = null;
    }
    renderCapture(st, rate);
    renderReplica(st.upload, now, first);
    const lag = num(st.lag_bytes);
    if (lag !== null) push(lagPoints, now, lag);
    if (rate !== null) push(ratePoints, now, rate);
    drawChart(ui.lagChart, ui.lagNow, lagPoints, now, lag === null ? null : formatBytes(lag), formatBytes, 'Replication lag');
    drawChart(ui.rateChart, ui.rateNow, ratePoints, now, rate === null ? null : formatRate(rate) + ' /s', formatRate, 'Changes per second');
    renderVersions(Array.isArray(st.tables) ? st.tables : []);
  }

  // since returns when the page first saw a condition that holds now, and
  // forgets the conditions that do not.
  function since(key, holds, now, first) {
    if (!holds) { seen.delete(key); return null; }
    if (!seen.has(key)) seen.set(key, { at: now, early: first, polls: 0 });
    const s = seen.get(key);
    s.polls++;
    return s;
  }

  function sinceWords(s) {
    return 'since ' + clock(s.at) + (s.early ? ' or earlier' : '');
  }

  function renderCapture(st, rate) {
    if (typeof st.state !== 'string' || st.state === '') { ui.capture.hidden = true; return; }
    let tone = 'ok', text;
    const behind = lsn(st.server_wal_end) !== null && lsn(st.received_lsn) !== null ?
      lsn(st.server_wal_end) - lsn(st.received_lsn) : null;
    const lagS = num(st.lag_seconds);
    switch (st.state) {
      case 'paused': tone = 'bad'; text = 'Capture paused: disk budget reached'; break;
      case 'snapshot': tone = 'warn'; text = 'Copying the tables’ existing rows'; break;
      case 'disconnected': tone = 'bad'; text = 'Not connected to PostgreSQL, retrying'; break;
      case 'starting': tone = 'warn'; text = 'Starting'; break;
      case 'stopped': tone = 'bad'; text = 'The agent is stopped'; break;
      case 'streaming':
        if (behind !== null && behind > CATCH_UP_BYTES) {
          tone = 'warn';
          text = 'Catching up, ' + (lagS ? formatSeconds(lagS) : formatBytes(behind)) + ' behind';
        } else {
          text = 'Capturing' + (rate === null ? '' : ', ' + formatRate(rate) + ' changes/s');
        }
        break;
      default: tone = 'warn'; text = 'Capture ' + st.state;
    }
    if (st.apply_state && st.apply_state !== 'applying') {
      tone = 'bad';
      text += '; ' + st.apply_state;
    }
    ui.capture.title = st.last_error ? 'last error: ' + st.last_error : '';
    say(ui.capture, ui.captureText, tone, text);
  }

  function renderReplica(up, now, first) {
    if (!up || typeof up !== 'object') { ui.replica.hidden = true; seen.clear(); return; }
    const versions = num(up.versions);
    if (versions !== null && prevVersions !== null && versions > prevVersions) lastUploadSeen = now;
    prevVersions = versions;
    const last = date(up.last_upload) || (lastUploadSeen && new Date(lastUploadSeen));
    const lastWords = last ? 'last upload ' + clock(last) : 'no upload yet';
    const backlog = num(up.backlog_versions) || 0;
    let tone = 'ok', text;
    const off = since('offline', up.online === false, now, first);
    // Each commit waits a moment for its upload: a backlog is news once
    // two polls in a row have seen it, so that a busy site does not
    // flicker between up to date and behind by one version.
    const backlogSeen = since('behind', up.online !== false && backlog > 0, now, first);
    const behind = backlogSeen && backlogSeen.polls >= 2 ? backlogSeen : null;
    if (off) {
      tone = 'bad';
      const at = date(up.offline_since);
      text = 'Replica offline ' + (at ? 'since ' + clock(at) : sinceWords(off)) + ' (' + lastWords + ')';
    } else if (behind) {
      tone = 'warn';
      text = 'Replica behind by ' + nf.format(backlog) + (backlog === 1 ? ' version ' : ' versions ') +
        sinceWords(behind) + ' (' + lastWords + ')';
    } else {
      text = 'Replica up to date, ' + lastWords;
    }
    const bytes = num(up.backlog_bytes);
    ui.replica.title = [up.target ? 'replica ' + up.target : '', bytes ? formatBytes(bytes) + ' to upload' : '',
      up.last_error ? 'last error: ' + up.last_error : ''].filter(Boolean).join('\n');
    say(ui.replica, ui.replicaText, tone, text);
  }

  function say(box, textEl, tone, text) {
    box.hidden = false;
    if (box.dataset.tone !== tone) box.dataset.tone = tone;
    setText(textEl, text);
  }

  // ---- charts: inline SVG sparklines of the last CHART_MS

  function push(points, t, v) {
    points.push([t, v]);
    while (points.length && points[0][0] < t - CHART_MS) points.shift();
  }

  // drawChart draws points as a polyline scaled to the chart's box: time
  // across (the last CHART_MS), 0 to the largest value up.
  function drawChart(fig, nowEl, points, now, current, fmt, name) {
    if (!points.length) { fig.hidden = true; return; }
    fig.hidden = false;
    const svg = fig.querySelector('svg');
    const [, , w, h] = svg.getAttribute('viewBox').split(' ').map(Number);
    let top = 0;
    for (const [, v] of points) top = Math.max(top, v);
    const scale = top > 0 ? (h - 2) / top : 0;
    const xy = points.map(([t, v]) =>
      ((t - (now - CHART_MS)) * w / CHART_MS).toFixed(1) + ',' + (h - 1 - v * scale).toFixed(1));
    svg.querySelector('polyline').setAttribute('points', xy.join(' '));
    setText(nowEl, current === null ? '–' : current);
    svg.setAttribute('aria-label', name + ' over the last ' + CHART_MS / 60000 + ' minutes: now ' +
      (current === null ? 'unknown' : current) + ', highest ' + fmt(top));
  }

  // ---- words

  // clock is a time as HH:MM (24 h, local), with the date when not today.
  function clock(d) {
    d = d instanceof Date ? d : new Date(d);
    const p = (n) => String(n).padStart(2, '0');
    const hm = p(d.getHours()) + ':' + p(d.getMinutes());
    const today = new Date();
    if (d.toDateString() === today.toDateString()) return hm;
    return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' + hm;
  }

  function date(v) {
    if (typeof v !== 'string' || v === '') return null;
    const d = new Date(v);
    return Number.isNaN(d.getTime()) ? null : d;
  }

  function formatRate(r) {
    return r >= 10 || r === 0 ? nf.format(Math.round(r)) : r.toFixed(1);
  }

  function formatSeconds(s) {
    if (s < 120) return Math.round(s) + ' s';
    if (s < 7200) return Math.round(s / 60) + ' min';
    return (s / 3600).toFixed(1) + ' h';
  }

  // lsn parses a PostgreSQL LSN ("16/B374D848") to a number.
  function lsn(v) {
    const m = typeof v === 'string' && /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(v);
    return m ? parseInt(m[1], 16) * 2 ** 32 + parseInt(m[2], 16) : null;
  }

  // renderVersions shows one chip per Delta table: version, remote version.
  function renderVersions(list) {
    const items = list.map((t) => {
      const li = el('li', 'ver');
      li.dataset.name = t.name || '';
      li.dataset.kind = t.kind || '';
      li.append(el('span', 'ver-name', t.name || '?'));
      if (t.kind) li.append(el('span', 'ver-kind', t.kind));
      const v = num(t.version), rv = num(t.remote_version);
      li.append(el('span', 'ver-local', v === null ? 'no version' : 'v' + v));
      if (rv !== null || 'remote_version' in t) {
        const r = el('span', 'ver-remote', rv === null ? 'not uploaded' : 'remote v' + rv);
        if (v !== null && (rv === null || rv < v)) r.classList.add('behind');
        li.append(r);
      }
      return li;
    });
    const sig = items.map((li) => li.textContent + li.innerHTML).join('|');
    if (sig !== ui.versions.dataset.sig) {
      ui.versions.dataset.sig = sig;
      ui.versions.replaceChildren(...items);
    }
  }

  function num(v) {
    if (typeof v === 'number' && Number.isFinite(v)) return v;
    if (typeof v === 'string' && v !== '' && Number.isFinite(Number(v))) return Number(v);
    return null;
  }

  function setText(e, text) {
    if (e.textContent !== text) e.textContent = text;
  }

  setConn('connecting', 'Connecting…');
  connect();
  pollStatus();
})();
