// nonstop live view: the sessions of this server, and a live view of each, fed by `subscribe`
// pushes on read-only spectator sockets (/ws/watch/{id}). Plain JavaScript, no dependencies.
//
// URL fragment options (a fragment never reaches the server): #token=T (servers run with
// --token; kept in this tab's sessionStorage, then removed from the address bar), #every=N
// (push every N ticks, default 4).
"use strict";

(() => {
  const POLL_MS = 1000;
  const MAX_VIEWS = 8; // live views open at once; more sessions are listed in the table only
  const ENDED_ROWS = 8; // ended sessions kept in the table
  const TABLE_SEATS = 4; // seats a table row names (a row of a thousand seats was 150 KB a second)
  const STRIP_COLUMNS = 150; // pushes shown in a view's strip
  const ENDED_VIEW_MS = 20000; // how long an ended session's view stays on the page
  const RECONNECT_MS = 3000;
  const FRAME_PX = 240; // on-screen size of a frame's longer side
  const TOKEN_KEY = "nonstop.token";

  const options = new URLSearchParams(location.hash.slice(1));
  const EVERY = clampInt(options.get("every"), 1, 600, 4);
  let token = options.get("token") || sessionStorage.getItem(TOKEN_KEY);
  if (options.has("token")) {
    sessionStorage.setItem(TOKEN_KEY, token);
    options.delete("token"); // keep it out of the address bar, bookmarks and screenshots
    history.replaceState(null, "", location.pathname + (options.toString() ? "#" + options : ""));
  }
  let askedForToken = false;

  const $ = (sel, root = document) => root.querySelector(sel);
  const views = new Map(); // session id -> View

  function clampInt(text, lo, hi, fallback) {
    const n = Number.parseInt(text ?? "", 10);
    return Number.isFinite(n) ? Math.min(hi, Math.max(lo, n)) : fallback;
  }

  function fmtPct(x) {
    return x === null || x === undefined || !Number.isFinite(x) ? "–" : `${(100 * x).toFixed(0)}%`;
  }

  function fmtNum(x, digits = 0) {
    if (x === null || x === undefined || !Number.isFinite(x)) return "–";
    return x.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: 0 });
  }

  function setStatus(state, text) {
    const el = $("#status");
    el.dataset.state = state;
    el.textContent = text;
  }

  // ---------------------------------------------------------------- HTTP with the token

  class NeedsToken extends Error {}

  async function getJSON(path) {
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    const reply = await fetch(path, { headers, cache: "no-store" });
    if (reply.status === 401) throw new NeedsToken(path);
    return { status: reply.status, body: await reply.json() };
  }

  function askForToken() {
    if (askedForToken) return;
    askedForToken = true;
    const given = window.prompt("This nonstop server needs its token (nonstop serve --token):");
    if (given) {
      token = given.trim();
      sessionStorage.setItem(TOKEN_KEY, token);
      askedForToken = false;
    }
  }

  function tokenSubprotocol(text) {
    // the token as a WebSocket subprotocol: browsers cannot set headers on a socket, and a
    // ?token= query would be written into the server's access log
    const bytes = new TextEncoder().encode(text);
    let binary = "";
    for (const b of bytes) binary += String.fromCharCode(b);
    return "nonstop.bearer." + btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function openSocket(kind, sid) {
    // a read-only socket of this server (/ws/watch or /ws/seats), with the token as a subprotocol
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const protocols = ["nonstop"];
    if (token) protocols.push(tokenSubprotocol(token));
    return new WebSocket(`${scheme}${location.host}/ws/${kind}/${encodeURIComponent(sid)}`, protocols);
  }

  // ---------------------------------------------------------------- the sessions table

  function renderTable(rows) {
    const running = rows.filter((r) => r.lifecycle !== "ended" && r.lifecycle !== "closed");
    const ended = rows.filter((r) => r.lifecycle === "ended" || r.lifecycle === "closed").slice(0, ENDED_ROWS);
    const shown = running.concat(ended);
    $("#session-count").textContent = `${running.length} running`;
    $("#no-sessions").hidden = shown.length > 0;
    const body = $("#sessions tbody");
    body.replaceChildren(...shown.map(tableRow));
  }

  function tableRow(r) {
    const tr = document.createElement("tr");
    tr.dataset.session = r.session_id;
    const live = r.lifecycle !== "ended" && r.lifecycle !== "closed";
    if (!live) tr.className = "ended";
    const seats = r.seats || [];
    const many = (r.seat_count ?? seats.length) > 4; // one cell per seat would not fit: the view has them all
    const cells = [
      ["code", r.session_id.slice(0, 8), r.session_id],
      ["", r.env],
      ["", many ? `${fmtNum(r.seat_count)} seats` : seats.map((s) => s.seat).join(", ")],
      ["badge", r.lifecycle, r.end_reason || ""],
      ["num", fmtNum(r.tick)],
      ["num", many ? `${fmtPct(r.inaction_fraction)} all seats` : seats.map((s) => fmtPct(s.inaction_fraction)).join(" / ")],
      ["num", many ? "see view" : seats.map((s) => (s.last_delay === null || s.last_delay < 0 ? "–" : `${s.last_delay} t`)).join(" / ")],
      ["num", r.lateness_p99_ms === null || r.lateness_p99_ms === undefined ? "–" : `${r.lateness_p99_ms.toFixed(2)} ms`],
      ["num", fmtNum(r.total_reward, 2)],
    ];
    for (const [kind, text, title] of cells) {
      const td = document.createElement("td");
      if (kind === "code") {
        const code = document.createElement("code");
        code.textContent = text;
        td.append(code);
      } else if (kind === "badge") {
        const span = document.createElement("span");
        span.className = `badge ${text}`;
        span.textContent = text;
        td.append(span);
      } else {
        td.textContent = text;
        if (kind) td.className = kind;
      }
      if (title) td.title = title;
      tr.append(td);
    }
    return tr;
  }

  // ---------------------------------------------------------------- one live view

  function b64ToBytes(b64) {
    const binary = atob(b64);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  function fnv1a(bytes) {
    let h = 0x811c9dc5;
    for (let i = 0; i < bytes.length; i++) {
      h ^= bytes[i];
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    return h.toString(16).padStart(8, "0");
  }

  const TYPED = { "|u1": Uint8Array, "|i1": Int8Array, "<u2": Uint16Array, "<i2": Int16Array,
                  "<u4": Uint32Array, "<i4": Int32Array, "<f4": Float32Array, "<f8": Float64Array,
                  "<i8": BigInt64Array, "<u8": BigUint64Array, "|b1": Uint8Array };

  // ---------------------------------------------------------------- every seat of a several-seat world

  const SEAT_GAP = 2; // px between cells
  const FEW_SEATS = 16; // up to this many seats, each cell is labelled
  const NONE_U8 = 255; // the feed's "none" (no tick yet, no delay)
  const ALIVE = 1, HELD = 2, PLACED = 4; // a seat's flags in the feed
  const DEAD_FILL = "#c9ced8";
  const EMPTY_FILL = "#e2e5eb";
  // a seat's fill by its inaction in 1/254ths: --agent's green at none, --beta's orange at all
  const FILLS = Array.from({ length: 255 }, (_, i) => mix(i / 254));

  function decodeUpdate(buffer) {
    // one binary update of /ws/seats (layout: nonstop.server.livefeed)
    const view = new DataView(buffer);
    const length = view.getUint32(0, true);
    const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 4, length)));
    const n = header.seats;
    let at = 4 + length;
    at += (4 - (at % 4)) % 4;
    const update = { header, returns: new Float32Array(buffer, at, n) };
    at += 4 * n;
    update.inaction = new Uint8Array(buffer, at, n);
    update.delay = new Uint8Array(buffer, at + n, n);
    update.flags = new Uint8Array(buffer, at + 2 * n, n);
    at += 3 * n;
    update.positions = header.positions ? new Uint8Array(buffer, at, 2 * n) : null;
    if (header.positions) at += 2 * n;
    update.frame = header.frame ? new Uint8Array(buffer, at, header.frame.bytes) : null;
    return update;
  }

  async function inflate(bytes) {
    // zlib-deflated bytes, inflated by the browser's own DecompressionStream
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  class SeatsPanel {
    // The seats section of a view: a canvas grid of every seat and the world's frame, drawn at most
    // once an animation frame from the newest update of the session's seats feed (/ws/seats/{id}).
    constructor(owner, count) {
      this.owner = owner;
      this.el = $(".seats", owner.el);
      this.el.hidden = false;
      owner.el.classList.toggle("wide", count > FEW_SEATS); // a big grid takes the page's width
      this.canvas = $("canvas.seat-grid", owner.el);
      this.world = $("canvas.world", owner.el);
      this.hello = null; // seat names and teams, sent once by the feed
      this.latest = null; // the newest update not yet drawn
      this.shown = null; // the update on screen
      this.updates = 0;
      this.drawn = 0;
      this.pendingFrame = null; // the newest update with a frame not yet painted
      this.painting = false;
      this.framesDrawn = 0;
      this.layout = null;
      this.ws = null;
      this.closedAt = 0;
      this.canvas.addEventListener("mousemove", (event) => this.hover(event));
      owner.el.seatCells = () => this.cells(); // every seat as drawn (for tests and the console)
    }

    connect() {
      const ws = openSocket("seats", this.owner.sid);
      ws.binaryType = "arraybuffer";
      this.ws = ws;
      ws.onmessage = (event) => {
        if (typeof event.data !== "string") return this.receive(decodeUpdate(event.data));
        const msg = JSON.parse(event.data);
        if (msg.type === "hello") this.hello = msg;
        else if (msg.type === "error") this.owner.error(msg.data);
      };
      ws.onclose = () => {
        this.ws = null;
        this.closedAt = Date.now();
      };
    }

    close() {
      if (this.ws) this.ws.close();
    }

    receive(update) {
      this.updates += 1;
      this.canvas.dataset.updates = String(this.updates);
      const queued = this.latest !== null;
      this.latest = update; // newest wins: an update that arrives before the next paint replaces this one
      if (!queued) requestAnimationFrame(() => this.draw());
    }

    draw() {
      const update = this.latest;
      this.latest = null;
      if (!update || !this.hello || update.header.seats !== this.hello.seats.length) return;
      this.shown = update;
      this.drawGrid(update);
      this.drawTeams(update.header);
      if (update.frame) this.drawWorld(update);
      else $(".world-box", this.owner.el).hidden = true;
      this.drawn += 1;
      this.canvas.dataset.drawn = String(this.drawn);
      $(".seat-count", this.owner.el).textContent = `${fmtNum(update.header.seats)} seats · tick ${fmtNum(update.header.tick)}`;
    }

    place(n) {
      // cells in rows as wide as the box allows; labelled cells when there are few seats
      const width = Math.max(160, Math.floor(this.canvas.parentElement.clientWidth) || 600);
      if (this.layout && this.layout.n === n && this.layout.width === width) return this.layout;
      const few = n <= FEW_SEATS;
      const w = few ? 150 : n > 600 ? 12 : n > 150 ? 16 : 22;
      const h = few ? 30 : w;
      const cols = Math.max(1, Math.min(n, Math.floor((width + SEAT_GAP) / (w + SEAT_GAP))));
      const rows = Math.ceil(n / cols);
      const dpr = window.devicePixelRatio || 1;
      const cssW = cols * (w + SEAT_GAP) - SEAT_GAP;
      const cssH = rows * (h + SEAT_GAP) - SEAT_GAP;
      this.canvas.style.width = `${cssW}px`;
      this.canvas.style.height = `${cssH}px`;
      this.canvas.width = Math.round(cssW * dpr);
      this.canvas.height = Math.round(cssH * dpr);
      this.canvas.setAttribute("aria-label", `${n} seats, a cell each, filled by inaction; hover a seat for its counters`);
      this.layout = { n, width, few, w, h, cols, dpr };
      return this.layout;
    }

    drawGrid(update) {
      const n = update.header.seats;
      const { few, w, h, cols, dpr } = this.place(n);
      const ctx = this.canvas.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
      const maxDelay = Math.max(1, Math.min(254, update.header.max_delay));
      const bar = few ? 4 : Math.max(2, Math.round(h / 5));
      ctx.font = "12px system-ui, sans-serif";
      ctx.textBaseline = "middle";
      const at = (i) => [(i % cols) * (w + SEAT_GAP), Math.floor(i / cols) * (h + SEAT_GAP)];
      // cells by fill, then every delay bar: a few colour changes a draw, not one a seat
      const byFill = new Map();
      for (let i = 0; i < n; i++) {
        const fill = this.fill(update, i);
        if (!byFill.has(fill)) byFill.set(fill, []);
        byFill.get(fill).push(i);
      }
      for (const [fill, seats] of byFill) {
        ctx.fillStyle = fill;
        for (const i of seats) ctx.fillRect(...at(i), w, h);
      }
      ctx.fillStyle = "#3b6fd8";
      for (let i = 0; i < n; i++) {
        const d = update.delay[i];
        if (d === NONE_U8) continue;
        const [x, y] = at(i);
        ctx.fillRect(x, y + h - bar, Math.max(0.08, d / maxDelay) * w, bar);
      }
      ctx.strokeStyle = "#1d2433";
      ctx.lineWidth = 2;
      for (let i = 0; i < n; i++) {
        if (!(update.flags[i] & HELD)) continue;
        const [x, y] = at(i);
        ctx.strokeRect(x + 1, y + 1, w - 2, h - 2);
      }
      if (!few) return;
      for (let i = 0; i < n; i++) {
        const cell = this.cell(update, i);
        const [x, y] = at(i);
        ctx.fillStyle = cell.dead ? "#6b7385" : "#fff";
        const label = `${this.hello.seats[i]} · ${fmtPct(cell.inaction)} · ${cell.delay === null ? "–" : cell.delay + " t"}`;
        ctx.fillText(label, x + 6, y + (h - bar) / 2, w - 10);
      }
    }

    fill(update, i) {
      const f = update.flags[i];
      const q = update.inaction[i];
      if ((f & PLACED) !== 0 && (f & ALIVE) === 0) return DEAD_FILL;
      return q === NONE_U8 ? EMPTY_FILL : FILLS[q];
    }

    cell(update, i) {
      // seat i of an update: its inaction (0..1 or null), delay (ticks or null), flags and fill
      const f = update.flags[i];
      const dead = (f & PLACED) !== 0 && (f & ALIVE) === 0;
      const q = update.inaction[i];
      const d = update.delay[i];
      const inaction = q === NONE_U8 ? null : q / 254;
      return { inaction, delay: d === NONE_U8 ? null : d, dead, held: (f & HELD) !== 0,
               fill: this.fill(update, i), ret: update.returns[i] };
    }

    cells() {
      // every seat of the update on screen, as the grid draws it
      const update = this.shown;
      if (!update) return [];
      return this.hello.seats.map((seat, i) => {
        const c = this.cell(update, i);
        return { seat, team: this.hello.teams[this.hello.team[i]], inaction: c.inaction === null ? "" : c.inaction.toFixed(3),
                 delay: c.delay === null ? "" : String(c.delay), alive: String(!c.dead), dead: c.dead, held: c.held,
                 fill: c.fill, total_reward: c.ret };
      });
    }

    hover(event) {
      // the seat under the pointer, in the canvas's tooltip
      const { layout, shown } = this;
      if (!layout || !shown) return;
      const box = this.canvas.getBoundingClientRect();
      const col = Math.floor((event.clientX - box.left) / (layout.w + SEAT_GAP));
      const i = Math.floor((event.clientY - box.top) / (layout.h + SEAT_GAP)) * layout.cols + col;
      if (col < 0 || col >= layout.cols || i < 0 || i >= shown.header.seats) return;
      const c = this.cell(shown, i);
      const team = this.hello.teams[this.hello.team[i]];
      this.canvas.title = `${this.hello.seats[i]} (${team}${c.held ? ", held by a client" : ", played by β"}${c.dead ? ", gone" : ""}): ` +
        `inaction ${fmtPct(c.inaction)}, delay ${c.delay === null ? "–" : c.delay + " t"}, return ${fmtNum(c.ret, 2)}`;
    }

    drawTeams(header) {
      const rows = header.teams.map(teamRow);
      if (header.teams_more > 0) {
        const tr = document.createElement("tr");
        const td = document.createElement("td");
        td.colSpan = 6;
        td.className = "dim";
        td.textContent = `… ${fmtNum(header.teams_more)} more teams`;
        tr.append(td);
        rows.push(tr);
      }
      $(".teams tbody", this.owner.el).replaceChildren(...rows);
    }

    drawWorld(update) {
      // newest wins, but a frame in flight is always finished: under load, dropping it for a newer
      // one could leave the map never drawn
      this.pendingFrame = update;
      if (!this.painting) this.paintFrames();
    }

    async paintFrames() {
      this.painting = true;
      try {
        while (this.pendingFrame) {
          const update = this.pendingFrame;
          this.pendingFrame = null;
          await this.paintFrame(update);
        }
      } finally {
        this.painting = false;
      }
    }

    async paintFrame(update) {
      const pixels = await inflate(update.frame);
      const box = $(".world-box", this.owner.el);
      const canvas = this.world;
      box.hidden = false;
      const [h, w] = update.header.frame.shape;
      const c = update.header.frame.shape.length === 3 ? update.header.frame.shape[2] : 1;
      const scale = Math.max(1, Math.floor(FRAME_PX / Math.max(w, h)));
      if (canvas.width !== w * scale || canvas.height !== h * scale) {
        canvas.width = w * scale;
        canvas.height = h * scale;
      }
      const small = new ImageData(w, h);
      for (let i = 0, j = 0; i < w * h; i++, j += c) {
        const k = 4 * i;
        small.data[k] = pixels[j];
        small.data[k + 1] = pixels[c >= 3 ? j + 1 : j];
        small.data[k + 2] = pixels[c >= 3 ? j + 2 : j];
        small.data[k + 3] = 255;
      }
      const bitmap = await createImageBitmap(small);
      const ctx = canvas.getContext("2d");
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(bitmap, 0, 0, canvas.width, canvas.height);
      canvas.dataset.marks = String(update.positions ? this.mark(ctx, update, scale) : 0);
      canvas.dataset.hash = fnv1a(pixels);
      this.framesDrawn += 1;
      canvas.dataset.drawn = String(this.framesDrawn);
    }

    mark(ctx, update, scale) {
      // a dot on every living agent, one path a team (a thousand arcs, a few fills)
      const radius = Math.max(2, scale * 0.45);
      let marks = 0;
      this.hello.teams.forEach((_, t) => {
        ctx.beginPath();
        for (let i = 0; i < update.header.seats; i++) {
          if (this.hello.team[i] !== t || !(update.flags[i] & ALIVE)) continue;
          const x = (update.positions[2 * i + 1] + 0.5) * scale;
          const y = (update.positions[2 * i] + 0.5) * scale;
          ctx.moveTo(x + radius, y);
          ctx.arc(x, y, radius, 0, 2 * Math.PI);
          marks += 1;
        }
        ctx.fillStyle = TEAM_COLOURS[t % TEAM_COLOURS.length];
        ctx.fill();
        ctx.strokeStyle = "#fff";
        ctx.lineWidth = 1;
        ctx.stroke();
      });
      return marks;
    }
  }

  class View {
    constructor(row) {
      this.sid = row.session_id;
      this.el = $("#view-template").content.firstElementChild.cloneNode(true);
      this.el.dataset.session = this.sid;
      $(".env", this.el).textContent = row.env;
      $(".sid", this.el).textContent = this.sid.slice(0, 8);
      $(".sid", this.el).title = this.sid;
      this.frame = $("canvas.frame", this.el);
      this.vector = $("pre.vector", this.el);
      this.strip = $("canvas.strip", this.el);
      this.columns = []; // {agent, beta, delay, total, newEpisode}
      this.pushes = 0;
      this.prev = null;
      this.ws = null;
      this.closedAt = 0;
      this.endedAt = 0;
      this.setState("connecting");
      // a several-seat world: every seat on a canvas grid, the world's frame, each team (fed by /ws/seats)
      const seatCount = row.seat_count ?? (row.seats || []).length;
      this.seats = seatCount > 1 ? new SeatsPanel(this, seatCount) : null;
      if (this.seats) {
        $(".seat-of-view", this.el).hidden = false;
        $(".shown-seat", this.el).textContent = row.seats[0].seat; // the pushed frame and counters are its
      }
      $("#views").append(this.el);
      this.connect();
      if (this.seats) this.seats.connect();
    }

    setState(text) {
      $(".state", this.el).textContent = text;
    }

    note(text, isError = false) {
      const el = $(".note", this.el);
      el.textContent = text;
      el.classList.toggle("error", isError);
    }

    connect() {
      const ws = openSocket("watch", this.sid);
      this.ws = ws;
      ws.onopen = () => {
        this.setState("watching");
        this.note(`pushed every ${EVERY} ticks`);
        ws.send(JSON.stringify({ type: "subscribe", data: { every: EVERY, encoding: "b64" } }));
      };
      ws.onmessage = (event) => {
        const msg = JSON.parse(event.data);
        if (msg.type === "push" || msg.type === "observation") this.update(msg.data.observation);
        else if (msg.type === "error") this.error(msg.data);
      };
      ws.onclose = (event) => {
        this.ws = null;
        this.closedAt = Date.now();
        if (!this.endedAt) {
          this.setState("disconnected");
          if (event.code === 1008) this.note("the server refused the token", true);
        }
      };
    }

    error(data) {
      if (data.code === "SESSION_ENDED" || data.code === "NO_SESSION") this.markEnded(data.message);
      else this.note(`${data.code}: ${data.message}`, true);
    }

    markEnded(message) {
      if (this.endedAt) return;
      this.endedAt = Date.now();
      this.el.classList.add("ended");
      this.setState("ended");
      this.note(message);
    }

    update(o) {
      this.pushes += 1;
      const prev = this.prev;
      this.prev = o;
      $(".tick", this.el).textContent = fmtNum(o.tick);
      $(".episode", this.el).textContent = fmtNum(o.episode);
      $(".return", this.el).textContent = fmtNum(o.total_reward, 2);
      $(".pushes", this.el).textContent = fmtNum(this.pushes);
      this.el.dataset.tick = String(o.tick);
      this.drawObs(o.obs);
      if (prev !== null) {
        const agent = o.agent_ticks - prev.agent_ticks;
        const beta = o.inaction_ticks - prev.inaction_ticks;
        this.columns.push({ agent, beta, delay: agent > 0 ? o.last_delay : null, total: o.total_reward,
                            newEpisode: o.episode !== prev.episode });
        if (this.columns.length > STRIP_COLUMNS) this.columns.shift();
        this.drawStrip();
      }
      const acted = this.columns.reduce((n, c) => n + c.agent, 0);
      const idle = this.columns.reduce((n, c) => n + c.beta, 0);
      $(".inaction", this.el).textContent = acted + idle ? fmtPct(idle / (acted + idle)) : "–";
      $(".delay", this.el).textContent = o.agent_ticks ? `${o.last_delay} t` : "–";
    }

    drawObs(obs) {
      if (obs === null || obs === undefined) {
        this.showVector("no observation sent (encoding none)");
        return;
      }
      if (Array.isArray(obs)) {
        this.frame.dataset.hash = fnv1a(new TextEncoder().encode(JSON.stringify(obs)));
        this.showVector(formatValues(obs.flat(Infinity)));
        return;
      }
      const bytes = b64ToBytes(obs.b64);
      this.frame.dataset.hash = fnv1a(bytes);
      const shape = obs.shape;
      const image = obs.dtype === "|u1" && (shape.length === 2 || (shape.length === 3 && [1, 3, 4].includes(shape[2])));
      if (!image) {
        const Typed = TYPED[obs.dtype];
        if (!Typed) {
          this.showVector(`${obs.dtype} ${JSON.stringify(shape)}`);
          return;
        }
        const values = Array.from(new Typed(bytes.buffer, 0, bytes.length / Typed.BYTES_PER_ELEMENT), Number);
        this.showVector(formatValues(values));
        return;
      }
      const [h, w] = shape;
      const c = shape.length === 3 ? shape[2] : 1;
      if (this.frame.width !== w || this.frame.height !== h) {
        this.frame.width = w;
        this.frame.height = h;
        const scale = FRAME_PX / Math.max(w, h); // the longer side FRAME_PX on screen, pixels kept sharp
        this.frame.style.width = `${Math.round(w * scale)}px`;
        this.frame.style.height = `${Math.round(h * scale)}px`;
      }
      this.frame.hidden = false;
      this.vector.hidden = true;
      const ctx = this.frame.getContext("2d");
      const img = ctx.createImageData(w, h);
      const px = img.data;
      for (let i = 0, j = 0; i < w * h; i++, j += c) {
        const k = 4 * i;
        if (c >= 3) {
          px[k] = bytes[j];
          px[k + 1] = bytes[j + 1];
          px[k + 2] = bytes[j + 2];
        } else {
          px[k] = px[k + 1] = px[k + 2] = bytes[j];
        }
        px[k + 3] = 255;
      }
      ctx.putImageData(img, 0, 0);
    }

    showVector(text) {
      this.frame.hidden = true;
      this.vector.hidden = false;
      this.vector.textContent = text;
    }

    drawStrip() {
      const canvas = this.strip;
      const ctx = canvas.getContext("2d");
      const dpr = window.devicePixelRatio || 1;
      const W = canvas.clientWidth || 600;
      const H = canvas.clientHeight || 120;
      if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
        canvas.width = Math.round(W * dpr); // drawn at the size shown: crisp lines and labels
        canvas.height = Math.round(H * dpr);
      }
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      const lane = H / 3;
      const pad = 4;
      const colW = W / STRIP_COLUMNS;
      const x0 = W - this.columns.length * colW; // newest at the right edge
      const color = cssColour;
      ctx.clearRect(0, 0, W, H);
      const cols = this.columns;
      const maxDelay = Math.max(1, ...cols.map((c) => c.delay ?? 0));
      const totals = cols.map((c) => c.total);
      const lo = Math.min(...totals);
      const hi = Math.max(...totals);
      cols.forEach((c, i) => {
        const x = x0 + i * colW;
        const n = c.agent + c.beta;
        if (n > 0) {
          const agentH = ((lane - 2 * pad) * c.agent) / n;
          ctx.fillStyle = color("--beta");
          ctx.fillRect(x, pad, colW - 0.5, lane - 2 * pad - agentH);
          ctx.fillStyle = color("--agent");
          ctx.fillRect(x, lane - pad - agentH, colW - 0.5, agentH);
        }
        if (c.delay !== null) {
          const dh = Math.max(1, ((lane - 2 * pad) * c.delay) / maxDelay);
          ctx.fillStyle = color("--delay");
          ctx.fillRect(x, 2 * lane - pad - dh, colW - 0.5, dh);
        }
        if (c.newEpisode) {
          ctx.fillStyle = "#b8bfcc";
          ctx.fillRect(x, 0, 1, H);
        }
      });
      ctx.strokeStyle = color("--ret");
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      cols.forEach((c, i) => {
        const y = hi > lo ? 3 * lane - pad - ((lane - 2 * pad) * (c.total - lo)) / (hi - lo) : 2.5 * lane;
        if (i === 0) ctx.moveTo(x0 + i * colW + colW / 2, y);
        else ctx.lineTo(x0 + i * colW + colW / 2, y);
      });
      ctx.stroke();
      ctx.fillStyle = "#e2e5eb";
      ctx.fillRect(0, lane, W, 1);
      ctx.fillRect(0, 2 * lane, W, 1);
      ctx.font = "10px system-ui, sans-serif";
      const label = (text, y) => { // on a light backing, readable over the bars
        const w = ctx.measureText(text).width + 6;
        ctx.fillStyle = "rgba(252, 252, 253, 0.85)";
        ctx.fillRect(2, y - 10, w, 13);
        ctx.fillStyle = color("--dim");
        ctx.fillText(text, 5, y);
      };
      ctx.textAlign = "left";
      label(`max ${maxDelay} t`, lane + 12);
      label(hi > lo ? `${fmtNum(lo, 1)} … ${fmtNum(hi, 1)}` : fmtNum(hi, 1), 2 * lane + 12);
      canvas.dataset.columns = String(this.pushes - 1);
    }

    close() {
      if (this.ws) this.ws.close();
      if (this.seats) this.seats.close();
      this.el.remove();
    }
  }

  const cssColours = new Map(); // the page's palette (--agent, --beta, ...), read once each
  function cssColour(name) {
    if (!cssColours.has(name)) cssColours.set(name, getComputedStyle(document.documentElement).getPropertyValue(name).trim());
    return cssColours.get(name);
  }

  const TEAM_COLOURS = ["#e0493e", "#3b6fd8", "#2e9e5b", "#d9822b", "#8a4fd1", "#1aa3a3"];

  function mix(fraction) {
    // a seat's fill: --agent's green at no inaction, --beta's orange at all
    const a = [0x2e, 0x9e, 0x5b];
    const b = [0xd9, 0x82, 0x2b];
    const f = Math.min(1, Math.max(0, fraction));
    return `rgb(${a.map((x, i) => Math.round(x + (b[i] - x) * f)).join(", ")})`;
  }

  function teamRow(t) {
    const tr = document.createElement("tr");
    tr.dataset.team = t.team;
    const cells = [
      [t.team, ""],
      [fmtNum(t.seats), "num"],
      [t.alive === null ? "–" : fmtNum(t.alive), "num"],
      [fmtPct(t.inaction_fraction), "num"],
      [t.delay_mean_ticks === null ? "–" : `${fmtNum(t.delay_mean_ticks, 1)} t`, "num"],
      [fmtNum(t.total_reward, 2), "num"],
    ];
    for (const [text, kind] of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      if (kind) td.className = kind;
      tr.append(td);
    }
    return tr;
  }

  function formatValues(values) {
    const shown = values.slice(0, 32).map((v) => (Number.isInteger(v) ? String(v) : v.toFixed(4)));
    const rows = [];
    for (let i = 0; i < shown.length; i += 4) rows.push(shown.slice(i, i + 4).join("  "));
    if (values.length > 32) rows.push(`… ${values.length} values`);
    return rows.join("\n");
  }

  // ---------------------------------------------------------------- the loop

  function syncViews(rows) {
    const byId = new Map(rows.map((r) => [r.session_id, r]));
    const now = Date.now();
    for (const [sid, view] of views) {
      const row = byId.get(sid);
      const live = row && row.lifecycle === "running";
      if (!live) view.markEnded(row ? `session ended (${row.end_reason || row.lifecycle})` : "session gone");
      if (view.endedAt && now - view.endedAt > ENDED_VIEW_MS) {
        view.close();
        views.delete(sid);
      } else if (live && !view.ws && now - view.closedAt > RECONNECT_MS) {
        view.connect();
      }
      if (live && view.seats && !view.seats.ws && now - view.seats.closedAt > RECONNECT_MS) view.seats.connect();
    }
    for (const row of rows) {
      if (row.lifecycle !== "running" || views.has(row.session_id)) continue;
      const open = [...views.values()].filter((v) => !v.endedAt).length;
      if (open >= MAX_VIEWS) break;
      views.set(row.session_id, new View(row));
    }
  }

  async function poll() {
    try {
      const sessions = await getJSON(`/live/sessions?max_seats=${TABLE_SEATS}`);
      renderTable(sessions.body.sessions);
      syncViews(sessions.body.sessions);
      const health = await getJSON("/health");
      const running = sessions.body.sessions.filter((r) => r.lifecycle === "running").length;
      setStatus(health.body.status, `${health.body.status} · ${running} / ${sessions.body.max_sessions} sessions`);
    } catch (err) {
      if (err instanceof NeedsToken) {
        setStatus("error", "needs the server's token: open /#token=TOKEN");
        askForToken();
      } else {
        setStatus("error", "server unreachable");
      }
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  poll();
})();
