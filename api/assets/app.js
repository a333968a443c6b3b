// alineo dashboard: a little vanilla JavaScript over the server-rendered
// pages and the live audit stream (Server-Sent Events). No build step.
(function () {
  "use strict";

  var TS = {sandbox_created: "sandbox.created", exec_start: "exec.started", exec_event: "exec.output",
    exec_complete: "exec.completed", checkpoint_created: "sandbox.checkpoint_created",
    sandbox_paused: "sandbox.paused", sandbox_resumed: "sandbox.resumed", sandbox_closed: "sandbox.closed"};
  var CARD_BYTES = 4096, PAGE_BYTES = 65536, TOKEN_KEY = "alineo_token";
  var enc = new TextEncoder();

  function $(sel, root) { return (root || document).querySelector(sel); }
  function $$(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function canon(ev) { return TS[ev] || ev; }
  function pad(n, w) { n = String(n); while (n.length < (w || 2)) n = "0" + n; return n; }
  // fmtMs formats Unix ms as the server does: "2006-01-02 15:04:05.000" (UTC).
  function fmtMs(ms) {
    if (!ms) return "—";
    var d = new Date(ms);
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " +
      pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds()) + "." + pad(d.getUTCMilliseconds(), 3);
  }
  // fmtDuration formats milliseconds as the server does.
  function fmtDuration(ms) {
    if (ms < 0) return "—";
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(2) + " s";
    var s = Math.round(ms / 1000), h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60);
    return (h ? h + "h" : "") + (h || m ? m + "m" : "") + (s % 60) + "s";
  }
  function payloadOf(e) {
    var p = e.payload;
    if (typeof p === "string") { try { var q = JSON.parse(p); if (q && typeof q === "object") return q; } catch (x) { /* a plain string */ } }
    return p === undefined || p === null ? {} : p;
  }
  function keyOf(e) { return String(e.stepIndex) + (e.branch === undefined || e.branch === null ? "" : "-" + e.branch); }
  function outputBytes(p) {
    if (p.data) { try { return atob(p.data).length; } catch (x) { /* fall through */ } }
    return enc.encode(p.text || "").length;
  }
  function summary(e) {
    var p = payloadOf(e), s;
    switch (canon(e.event)) {
      case "exec.started": s = p.kind === "code" || (!p.cmd && p.code) ? p.code : p.cmd; break;
      case "exec.output": s = p.type + ": " + (p.text || ""); break;
      case "exec.completed": s = JSON.stringify({seq: p.seq || 0, exitCode: p.exitCode || 0}); break;
      default: s = e.payload === undefined ? "" : (typeof e.payload === "string" ? e.payload : JSON.stringify(e.payload));
    }
    s = s || "";
    if (e.error) s += " error: " + e.error;
    return s.length > 200 ? s.slice(0, 197) + "..." : s;
  }

  // ---- terminal text: ANSI SGR colours as classes, other escapes dropped.
  function ansiState(base) { return {base: base || "", cls: [], pending: ""}; }
  function sgr(st, params) {
    var ps = params === "" ? ["0"] : params.split(";");
    for (var i = 0; i < ps.length; i++) {
      var n = parseInt(ps[i] || "0", 10);
      if (n === 0) st.cls = [];
      else if (n === 1) st.cls.push("a-b");
      else if (n === 3) st.cls.push("a-i");
      else if (n === 4) st.cls.push("a-u");
      else if (n === 22 || n === 23 || n === 24) st.cls = st.cls.filter(function (c) { return c !== {22: "a-b", 23: "a-i", 24: "a-u"}[n]; });
      else if (n === 39) st.cls = st.cls.filter(function (c) { return !/^a-(3|9)\d$/.test(c); });
      else if (n === 49) st.cls = st.cls.filter(function (c) { return !/^a-4\d$/.test(c); });
      else if ((n >= 30 && n <= 37) || (n >= 90 && n <= 97)) { st.cls = st.cls.filter(function (c) { return !/^a-(3|9)\d$/.test(c); }); st.cls.push("a-" + n); }
      else if (n >= 40 && n <= 47) { st.cls = st.cls.filter(function (c) { return !/^a-4\d$/.test(c); }); st.cls.push("a-" + n); }
      else if (n === 38 || n === 48) i += ps[i + 1] === "5" ? 2 : 4; // 256-colour and RGB: not rendered
    }
  }
  function appendTerm(pre, text, st) {
    text = st.pending + text;
    st.pending = "";
    var out = document.createDocumentFragment(), i = 0, run = "";
    function flush() {
      if (!run) return;
      var c = st.cls.concat(st.base ? [st.base] : []).join(" ");
      if (c) out.appendChild(el("span", c, run)); else out.appendChild(document.createTextNode(run));
      run = "";
    }
    while (i < text.length) {
      var ch = text.charCodeAt(i);
      if (ch !== 27) { run += text[i++]; continue; }
      var m = /^\x1b\[([0-9;?]*)([ -\/]*)([@-~])/.exec(text.slice(i, i + 64));
      if (m) { flush(); if (m[3] === "m" && !m[2]) sgr(st, m[1]); i += m[0].length; continue; }
      var o = /^\x1b\][^\x07\x1b]*(\x07|\x1b\\)/.exec(text.slice(i));
      if (o) { flush(); i += o[0].length; continue; }
      if (text.length - i < 64 && /^\x1b(\[[0-9;?]*[ -\/]*|\][^\x07\x1b]*)?$/.test(text.slice(i))) { flush(); st.pending = text.slice(i); break; }
      flush(); i += 2; // a two-byte escape
    }
    flush();
    pre.appendChild(out);
  }
  function termState(pre, base) {
    if (!pre._ansi) pre._ansi = {};
    if (!pre._ansi[base]) pre._ansi[base] = ansiState(base);
    return pre._ansi[base];
  }
  // Server-rendered terminal text with escapes is re-rendered with colours.
  function colourise() {
    $$("pre.term").forEach(function (pre) {
      if (pre.textContent.indexOf("\x1b") < 0) return;
      var parts = pre.children.length ? $$("span", pre).map(function (s) { return [s.className, s.textContent]; }) : [["", pre.textContent]];
      pre.textContent = "";
      parts.forEach(function (p) { appendTerm(pre, p[1], termState(pre, p[0])); });
    });
  }

  // ---- the live stream.
  function live(onEvent) {
    var box = $("#live"), status = $("#live-status");
    if (!box || !box.getAttribute("data-src") || !window.EventSource) return;
    var src = new EventSource(box.getAttribute("data-src"));
    src.onopen = function () { status.textContent = "live"; status.className = "live-status on"; };
    src.onerror = function () { status.textContent = "reconnecting…"; status.className = "live-status retry"; };
    src.onmessage = function (m) {
      var e;
      try { e = JSON.parse(m.data); } catch (x) { return; }
      e.seq = e.seq || Number(m.lastEventId);
      onEvent(e, m);
    };
  }
  function tailRow(e, m, all) {
    var body = $("#tail-body");
    if (!body || (body.getAttribute("data-event") && body.getAttribute("data-event") !== canon(e.event))) return;
    var tr = el("tr", "event live");
    tr.setAttribute("data-seq", m.lastEventId);
    tr.setAttribute("data-ts", e.ts);
    tr.setAttribute("data-received-at", Date.now());
    [m.lastEventId, fmtMs(e.ts), all ? e.name + " / " + e.sandboxId : String(e.stepIndex), e.event, e.actor || "—", summary(e)].forEach(function (t, i) {
      tr.appendChild(el("td", i === 5 ? "mono" : i === 4 ? "actor" : "", t));
    });
    body.appendChild(tr);
    while (all && body.children.length > 200) body.removeChild(body.firstChild);
  }
  function flash(node) {
    node.classList.remove("changed");
    void node.offsetWidth; // restart the animation
    node.classList.add("changed");
  }
  function badge(status) { return el("span", "badge " + status, status); }

  // ---- writes: always with the bearer header; the cookie authorizes reads only.
  function askToken() {
    return new Promise(function (resolve, reject) {
      var bar = $("#token-bar"), form = $("#token-form"), input = $("#token-input");
      bar.hidden = false;
      input.value = "";
      input.focus();
      form.onsubmit = function (ev) {
        ev.preventDefault();
        bar.hidden = true;
        sessionStorage.setItem(TOKEN_KEY, input.value);
        resolve(input.value);
      };
      $("#token-cancel").onclick = function () { bar.hidden = true; reject(new Error("no token given")); };
    });
  }
  function write(method, url, body, retried) {
    var h = {"Accept": "application/json"};
    if (body !== undefined) h["Content-Type"] = "application/json";
    var tok = sessionStorage.getItem(TOKEN_KEY);
    if (tok) h.Authorization = "Bearer " + tok;
    return fetch(url, {method: method, headers: h, body: body, credentials: "same-origin", cache: "no-store"}).then(function (r) {
      if (r.status === 401 && !retried) {
        sessionStorage.removeItem(TOKEN_KEY);
        return askToken().then(function () { return write(method, url, body, true); });
      }
      return r.text().then(function (t) {
        var v = null;
        try { v = t ? JSON.parse(t) : null; } catch (x) { /* not JSON */ }
        if (!r.ok) throw new Error((v && v.message) || ("HTTP " + r.status));
        return v;
      });
    });
  }
  window.alineoWrite = write; // for the console and the tests

  // ---- pages.
  function listPage() {
    var table = $("#sandboxes"), body = $("#sandboxes-body");
    var f = {status: table.getAttribute("data-filter-status"), name: table.getAttribute("data-filter-name"), run: table.getAttribute("data-filter-run"),
      failed: table.getAttribute("data-filter-failed") === "1", from: Number(table.getAttribute("data-filter-from")), to: Number(table.getAttribute("data-filter-to"))};
    var firstPage = !/[?&]before=/.test(location.search);
    function row(e) { return $('tr.sandbox[data-id="' + CSS.escape(e.sandboxId) + '"][data-name="' + CSS.escape(e.name) + '"]', body); }
    function figures() {
      var rows = $$("tr.sandbox", body), running = 0, execs = 0;
      rows.forEach(function (r) { if (r.getAttribute("data-status") === "running") running++; execs += Number($(".execs", r).textContent) || 0; });
      $("#fig-shown").textContent = rows.length;
      $("#fig-running").textContent = running;
      $("#fig-completed").textContent = rows.length - running;
      $("#fig-execs").textContent = execs;
      $("#empty").hidden = rows.length > 0;
    }
    function insert(e) {
      var p = payloadOf(e), run = p.runId || e.sandboxId;
      // A new session has no failed exec yet, and starts now: outside a
      // range that ended.
      if (!firstPage || f.status === "completed" || (f.name && f.name !== e.name) || (f.run && f.run !== run) ||
        f.failed || (f.to && e.ts >= f.to) || (f.from && e.ts < f.from)) return;
      var tr = el("tr", "sandbox");
      tr.setAttribute("data-name", e.name);
      tr.setAttribute("data-id", e.sandboxId);
      tr.setAttribute("data-status", "running");
      tr.setAttribute("data-run", run);
      var name = el("td", "name"), a = el("a", "", e.name);
      a.href = "?name=" + encodeURIComponent(e.name);
      name.appendChild(a);
      var id = el("td", "mono"), b = el("a", "", e.sandboxId);
      b.href = "/ui/sandboxes/" + encodeURIComponent(e.name) + "/" + encodeURIComponent(e.sandboxId);
      id.appendChild(b);
      var st = el("td", "status");
      st.appendChild(badge("running"));
      var rc = el("td", "mono"), c = el("a", "", run.length > 12 ? run.slice(0, 12) + "…" : run);
      c.href = "/ui/runs/" + encodeURIComponent(run);
      c.title = run;
      rc.appendChild(c);
      [name, id, st, el("td", "started-at", fmtMs(e.ts)), el("td", "completed-at", "—"), el("td", "execs num", "0"), rc].forEach(function (td) { tr.appendChild(td); });
      body.insertBefore(tr, body.firstChild);
      return tr;
    }
    live(function (e, m) {
      tailRow(e, m, true);
      var ev = canon(e.event), tr = row(e);
      if (ev === "sandbox.created" && !tr) tr = insert(e);
      if (!tr) return;
      if (ev === "exec.completed") {
        var n = $(".execs", tr), fe = $(".failed-execs", tr), p = payloadOf(e);
        n.textContent = (Number(n.textContent) || 0) + 1;
        if (fe && ((p.exitCode || 0) !== 0 || e.error)) fe.textContent = (parseInt(fe.textContent, 10) + 1) + " failed";
      } else if (ev === "sandbox.closed") {
        tr.setAttribute("data-status", "completed");
        var s = $(".status", tr);
        s.replaceChild(badge("completed"), $(".badge", s));
        $(".completed-at", tr).textContent = fmtMs(e.ts);
        if (f.status === "running") body.removeChild(tr);
      } else if (ev !== "sandbox.created") return;
      tr.setAttribute("data-updated-at", Date.now());
      flash(tr);
      figures();
    });
  }

  function execCard(tl, e) {
    var k = keyOf(e), li = $('li.exec[data-key="' + CSS.escape(k) + '"]', tl);
    if (li) return li;
    var empty = $("#timeline-empty");
    if (empty) empty.remove();
    li = el("li", "exec");
    li.setAttribute("data-key", k);
    li.setAttribute("data-step", e.stepIndex);
    li.setAttribute("data-bytes", "0");
    var head = el("div", "exec-head"), a = el("a", "step", "#" + k);
    a.href = location.pathname + "/execs/" + k;
    head.appendChild(a);
    head.appendChild(el("code", "cmd", ""));
    head.appendChild(el("span", "when", fmtMs(e.ts)));
    head.appendChild(el("span", "duration", ""));
    head.appendChild(el("span", "exit running", "running"));
    li.appendChild(head);
    var pre = el("pre", "term");
    pre.hidden = true;
    li.appendChild(pre);
    var more = el("p", "more"), ma = el("a");
    ma.href = a.href;
    ma.appendChild(el("span", "rest", "0"));
    ma.appendChild(document.createTextNode(" more bytes: open the exec"));
    more.appendChild(ma);
    more.hidden = true;
    li.appendChild(more);
    tl.appendChild(li);
    return li;
  }
  // interrupt marks a running exec's badge as interrupted: its sandbox closed.
  function interrupt(node) {
    node.className = "exit interrupted";
    node.textContent = "interrupted";
    node.title = "the sandbox closed before the exec completed";
  }
  function setExit(node, p, done) {
    node.className = "exit " + (!done ? "running" : (p.exitCode || 0) === 0 ? "ok" : "fail");
    node.textContent = done ? "exit " + (p.exitCode || 0) : "running";
    if (done) node.setAttribute("data-exit", p.exitCode || 0);
  }
  function markerLabel(ev, p) {
    switch (ev) {
      case "sandbox.created": return "created";
      case "sandbox.checkpoint_created": return "checkpoint " + (p.snapshotId || "") + (p.name ? " “" + p.name + "”" : "");
      case "sandbox.paused": return "paused";
      case "sandbox.resumed": return "resumed";
      case "sandbox.closed": return "closed" + (p.reason ? ": " + p.reason : "") + (p.by ? " by " + p.by : "");
    }
    return ev + " " + JSON.stringify(p);
  }

  function sandboxPage() {
    var tl = $("#timeline");
    live(function (e, m) {
      tailRow(e, m, false);
      var ev = canon(e.event), p = payloadOf(e), li;
      if (ev === "exec.started") {
        li = execCard(tl, e);
        li.setAttribute("data-started", e.ts);
        $(".cmd", li).textContent = p.kind === "code" || (!p.cmd && p.code) ? p.code : p.cmd;
        $(".when", li).textContent = fmtMs(e.ts);
      } else if (ev === "exec.output") {
        if (p.type !== "stdout" && p.type !== "stderr") return;
        li = execCard(tl, e);
        var n = outputBytes(p), shown = Number(li.getAttribute("data-bytes")), pre = $("pre.term", li);
        if (shown + n <= CARD_BYTES) {
          pre.hidden = false;
          appendTerm(pre, p.text || "", termState(pre, p.type));
          li.setAttribute("data-bytes", shown + n);
        } else {
          var rest = $(".rest", li);
          rest.textContent = (Number(rest.textContent) || 0) + n;
          rest.parentNode.parentNode.hidden = false;
        }
      } else if (ev === "exec.completed") {
        li = execCard(tl, e);
        setExit($(".exit", li), p, true);
        var st = Number(li.getAttribute("data-started"));
        if (st) $(".duration", li).textContent = fmtDuration(e.ts - st);
        var c = $("#sandbox-execs");
        c.textContent = (Number(c.textContent) || 0) + 1;
        flash(c);
      } else {
        var mk = el("li", "marker m-" + ev);
        mk.setAttribute("data-seq", e.seq);
        mk.appendChild(el("span", "when", fmtMs(e.ts)));
        mk.appendChild(document.createTextNode(" "));
        mk.appendChild(el("span", "label", markerLabel(ev, p)));
        tl.appendChild(mk);
        var empty = $("#timeline-empty");
        if (empty) empty.remove();
        if (ev === "sandbox.closed") {
          $$("li.exec .exit.running", tl).forEach(function (x) { interrupt(x); flash(x.closest("li")); });
          var s = $("#sandbox-status");
          s.textContent = "";
          s.setAttribute("data-status", "completed");
          s.appendChild(badge("completed"));
          $("#sandbox-completed").textContent = fmtMs(e.ts);
          flash(s);
        }
      }
      if (li) flash(li);
    });
    var del = $("#delete-sandbox");
    if (del) del.onclick = function () {
      var out = $("#delete-result");
      if (!del.classList.contains("armed")) { del.classList.add("armed"); del.textContent = "Click again to delete"; return; }
      write("DELETE", del.getAttribute("data-url")).then(function () {
        out.className = "ok"; out.textContent = "deleted"; del.disabled = true;
      }, function (err) { out.className = "err"; out.textContent = err.message; });
    };
  }

  function execPage() {
    var key = $("#exec-head").getAttribute("data-key"), started = Number($("#exec-head").getAttribute("data-started"));
    function pager(pre) { return $("#" + pre.id + "-section .pager"); }
    function update(pre) {
      var shown = Number(pre.getAttribute("data-shown")), total = Number(pre.getAttribute("data-total")), pg = pager(pre);
      $("#" + pre.id + "-total").textContent = total;
      $(".rest", pg).textContent = total - shown;
      pg.hidden = shown >= total;
      var empty = $("#" + pre.id + "-empty");
      if (empty) empty.hidden = total > 0;
    }
    function more(pre, all) {
      var shown = Number(pre.getAttribute("data-shown"));
      if (!pre._dec) pre._dec = new TextDecoder("utf-8");
      return fetch(pre.getAttribute("data-src") + "&offset=" + shown + "&limit=" + PAGE_BYTES, {credentials: "same-origin", cache: "no-store"}).then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        var total = Number(r.headers.get("X-Total-Bytes"));
        return r.arrayBuffer().then(function (buf) {
          appendTerm(pre, pre._dec.decode(new Uint8Array(buf), {stream: true}), termState(pre, ""));
          pre.setAttribute("data-shown", shown + buf.byteLength);
          pre.setAttribute("data-total", Math.max(total, shown + buf.byteLength));
          update(pre);
          if (all && buf.byteLength > 0 && shown + buf.byteLength < total) return more(pre, true);
        });
      }).catch(function (err) { $(".pager", pre.parentNode).appendChild(el("span", "err", " " + err.message)); });
    }
    $$("button.load-more").forEach(function (b) { b.onclick = function () { more($("#" + b.getAttribute("data-for")), false); }; });
    $$("button.load-all").forEach(function (b) { b.onclick = function () { more($("#" + b.getAttribute("data-for")), true); }; });
    live(function (e) {
      var ev = canon(e.event), p = payloadOf(e);
      if (ev === "sandbox.closed") {
        var r = $("#exec-exit .exit.running");
        if (r) {
          interrupt(r);
          var note = $("#exec-interrupted");
          $(".closed-reason", note).textContent = p.reason ? " (" + p.reason + (p.by ? " by " + p.by : "") + ")" : "";
          note.hidden = false;
        }
        return;
      }
      if (keyOf(e) !== key) return;
      if (ev === "exec.output" && (p.type === "stdout" || p.type === "stderr")) {
        var pre = $("#" + p.type), n = outputBytes(p), shown = Number(pre.getAttribute("data-shown")), total = Number(pre.getAttribute("data-total"));
        if (shown === total) {
          appendTerm(pre, p.text || "", termState(pre, ""));
          pre.setAttribute("data-shown", shown + n);
        }
        pre.setAttribute("data-total", total + n);
        update(pre);
      } else if (ev === "exec.completed") {
        var x = $("#exec-exit");
        x.textContent = "";
        var s = el("span");
        setExit(s, p, true);
        x.appendChild(s);
        if (started) $("#exec-duration").textContent = fmtDuration(e.ts - started);
        $("#exec-completed").textContent = fmtMs(e.ts);
      }
    });
  }

  function jobCells(tr, j) {
    tr.setAttribute("data-state", j.state);
    var st = $(".state", tr);
    if (st.textContent !== j.state) { st.textContent = ""; st.appendChild(el("span", "badge job-" + j.state, j.state)); flash(tr); }
    $(".worker", tr).textContent = j.worker || "—";
    $(".attempt", tr).textContent = j.attempt;
    $(".steps", tr).textContent = j.done + "/" + j.steps;
    $(".updated", tr).textContent = fmtMs(j.updatedAt);
  }
  function jobRow(j) {
    var tr = el("tr", "job");
    tr.setAttribute("data-id", j.id);
    var id = el("td", "mono"), a = el("a", "", j.id.slice(0, 12) + "…");
    a.href = "/ui/jobs/" + j.id;
    id.appendChild(a);
    var sb = el("td", "mono", j.sandboxId ? "" : "—");
    if (j.sandboxId) {
      var b = el("a", "", j.sandboxId.length > 12 ? j.sandboxId.slice(0, 12) + "…" : j.sandboxId);
      b.href = "/ui/sandboxes/" + encodeURIComponent(j.sandboxName || "") + "/" + encodeURIComponent(j.sandboxId);
      sb.appendChild(b);
    }
    [el("td", "", j.name), id, el("td", "state"), el("td", "submitter", j.submitter || "—"), el("td", "worker"), el("td", "num attempt"), el("td", "num steps"),
     el("td", "", j.checkpoint ? j.checkpoint.tag + " (next step " + j.checkpoint.next + ")" : "—"), sb,
     el("td", "", fmtMs(j.submittedAt)), el("td", "updated")].forEach(function (td) { tr.appendChild(td); });
    jobCells(tr, j);
    return tr;
  }
  // poll calls f with url's JSON every few seconds. The indicator says live
  // once f has shown an answer; a failure of f itself (the page's fault, not
  // the connection's) says so instead of "reconnecting…".
  function poll(url, every, f) {
    function say(text, cls) { var s = $("#live-status"); s.textContent = text; s.className = "live-status " + cls; }
    function tick() {
      fetch(url, {credentials: "same-origin", cache: "no-store"}).then(function (r) {
        if (!r.ok) { say("HTTP " + r.status, "retry"); return; }
        return r.json().then(function (v) {
          try { f(v); } catch (err) { say("page error: " + err.message, "retry"); if (window.console) console.error(err); return; }
          say("live", "on");
        });
      }, function () { say("reconnecting…", "retry"); })
        .then(function () { setTimeout(tick, every); });
    }
    tick();
  }
  function jobsPage() {
    var body = $("#jobs-body");
    function refresh(v) {
      (v.jobs || []).slice().reverse().forEach(function (j) {
        var tr = $('tr.job[data-id="' + CSS.escape(j.id) + '"]', body);
        if (tr) jobCells(tr, j); else body.insertBefore(jobRow(j), body.firstChild);
      });
      $("#jobs-empty").hidden = $$("tr.job", body).length > 0;
    }
    poll("/v1/jobs?limit=200", 2000, refresh);
    if (!$("#submit-form")) return; // a read-only user: no submit form
    $("#submit-form").onsubmit = function (ev) {
      ev.preventDefault();
      var out = $("#submit-result");
      out.className = "muted"; out.textContent = "submitting…";
      write("POST", "/v1/jobs", $("#spec").value).then(function (j) {
        out.className = "ok"; out.textContent = "queued ";
        var a = el("a", "", j.id);
        a.href = "/ui/jobs/" + j.id;
        a.id = "submitted-job";
        out.appendChild(a);
        refresh({jobs: [j]});
      }, function (err) { out.className = "err"; out.textContent = err.message; });
    };
  }
  function terminal(state) { return state === "succeeded" || state === "failed" || state === "canceled"; }
  function jobPage() {
    var id = $("#job-head").getAttribute("data-id"), cancel = $("#job-cancel"), retry = $("#job-retry"), out = $("#job-action-result");
    function show(j) {
      var st = $("#job-state");
      if (st.textContent !== j.state) { st.textContent = ""; st.appendChild(el("span", "badge job-" + j.state, j.state)); flash(st); }
      $("#job-worker").textContent = j.worker || "—";
      $("#job-attempt").textContent = j.attempt;
      $("#job-steps").textContent = j.done + "/" + j.steps;
      var e = $("#job-error");
      e.textContent = j.error || "";
      e.hidden = !j.error;
      cancel.hidden = terminal(j.state) || !!j.cancelRequested;
      retry.hidden = !(j.state === "failed" || j.state === "canceled") || !!j.retriedAs;
      var cr = $("#job-cancel-requested");
      cr.hidden = terminal(j.state) || !j.cancelRequested;
      $(".by", cr).textContent = j.canceledBy || "";
      if (j.retriedAs) retried(j.retriedAs);
    }
    function retried(next) {
      var a = $("#job-retried-as");
      a.href = "/ui/jobs/" + next;
      a.firstChild.textContent = next.slice(0, 12) + "…";
      $("#job-retried").hidden = false;
      retry.hidden = true;
    }
    poll("/v1/jobs/" + id, 2000, show);
    // Cancel takes two clicks; both write with the bearer header.
    cancel.onclick = function () {
      if (!cancel.classList.contains("armed")) { cancel.classList.add("armed"); cancel.textContent = "Click again to cancel"; return; }
      cancel.disabled = true;
      write("POST", cancel.getAttribute("data-url"), "{}").then(function (j) {
        out.className = "ok"; out.textContent = j.state === "canceled" ? "canceled" : "cancel requested";
        show(j);
      }, function (err) { out.className = "err"; out.textContent = err.message; })
        .then(function () { cancel.disabled = false; cancel.classList.remove("armed"); cancel.textContent = "Cancel the job"; });
    };
    retry.onclick = function () {
      retry.disabled = true;
      write("POST", retry.getAttribute("data-url"), "{}").then(function (j) {
        out.className = "ok"; out.textContent = "retried as ";
        var a = el("a", "", j.id);
        a.href = "/ui/jobs/" + j.id;
        a.id = "retry-job";
        out.appendChild(a);
        retried(j.id);
      }, function (err) { out.className = "err"; out.textContent = err.message; })
        .then(function () { retry.disabled = false; });
    };
  }

  function executorRow(x) {
    var tr = el("tr", "executor");
    tr.setAttribute("data-id", x.id);
    tr.setAttribute("data-state", x.state);
    var st = el("td", "state"), hb = el("td", "heartbeat", fmtMs(x.heartbeatAt)), js = el("td", "jobs"), n = (x.jobs || []).length;
    st.appendChild(el("span", "badge x-" + x.state, x.state));
    hb.setAttribute("data-at", x.heartbeatAt || 0);
    (x.jobs || []).forEach(function (j) {
      var a = el("a", "job", j.name + " ");
      a.href = "/ui/jobs/" + j.id;
      a.setAttribute("data-job", j.id);
      a.appendChild(el("span", "muted", j.done + "/" + j.steps));
      js.appendChild(a);
      js.appendChild(document.createTextNode(" "));
    });
    if (!n) js.textContent = "—";
    [el("td", "mono id", x.id), st, el("td", "host", x.host ? x.host + " (pid " + x.pid + ")" : "—"), el("td", "started", fmtMs(x.startedAt)), hb,
     el("td", "num slots", x.concurrency ? (x.running || []).length + "/" + x.concurrency : "—"), js].forEach(function (td) { tr.appendChild(td); });
    return tr;
  }
  function executorsPage() {
    poll("/v1/executors", 2000, function (v) {
      var body = $("#executors-body"), xs = v.executors || [], live = 0, running = 0;
      body.textContent = "";
      xs.forEach(function (x) {
        body.appendChild(executorRow(x));
        if (x.state === "live" || x.state === "draining") live++;
        running += (x.jobs || []).length;
      });
      $("#fig-live").textContent = live;
      $("#fig-jobs").textContent = running;
      $("#executors-empty").hidden = xs.length > 0;
    });
  }

  function loginPage() {
    var form = $("#login-form");
    if (form) form.addEventListener("submit", function () { sessionStorage.setItem(TOKEN_KEY, $("#login-token").value); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    colourise();
    loginPage();
    var box = $("#live"), kind = box ? box.getAttribute("data-page") : "";
    // Pages with neither the stream nor polling have no live indicator.
    if (!(box && (box.getAttribute("data-src") || kind === "jobs" || kind === "job" || kind === "executors"))) $("#live-status").hidden = true;
    ({list: listPage, sandbox: sandboxPage, exec: execPage, jobs: jobsPage, job: jobPage, executors: executorsPage}[kind] || function () {})();
    document.body.setAttribute("data-ready", "1");
  });
})();
