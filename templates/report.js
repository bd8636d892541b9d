/* groundlens report: an index of traces, the steps table (sorted, filtered, paged, expandable) and
   the flow of a trace. Every row is built here from the embedded JSON, only when it is shown, and
   every text reaches the DOM through textContent only. */
(function () {
  "use strict";
  var t0 = performance.now();
  var BAND_RANK = { error: 0, flagged: 1, review: 2, trusted: 3, skipped: 4 };
  var DEFAULT_DIR = { rank: 1, band: 1, score: 1, node: 1, trace: 1, latency: -1, index: 1 };
  var $ = function (id) { return document.getElementById(id); };

  var DATA = JSON.parse($("gl-data").textContent || "{}");
  var ROWS = DATA.rows || [], STEPS = DATA.steps || [], TRACES = DATA.traces || [];
  var multi = TRACES.length > 1;
  var tbody = $("gl-rows");
  var table = $("gl-table");
  var ncols = table.tHead.rows[0].cells.length;
  var items = ROWS.map(function (r, k) {
    return {
      r: r, i: k, rank: r.rank, band: r.band, method: r.method, node: r.node, trace: r.trace, t: r.t,
      score: r.score === null ? null : r.score, latency: r.latency === null ? null : r.latency, index: r.index,
      tr: null, detail: null, open: false, hay: null
    };
  });
  var byPos = items.slice();  // by row position (= risk rank - 1), whatever the sort
  var matched = items.slice();   // the steps that pass the filters, in table order
  var page = 0;
  var pageSize = +$("gl-page-size").value;  // 0: all
  var sortState = { key: "rank", dir: 1 };
  var onlyCascade = false;
  var timings = { init: 0, lastSort: 0, lastFilter: 0, lastRender: 0, lastIndex: 0 };
  window.__glTimings = timings;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function badge(band) { return el("span", "gl-badge gl-band-" + band, band); }

  // ------------------------------------------------------------ a row, built when first shown

  // a button that goes to the row at position pos (see goTo)
  function linkTo(pos, text, cls) {
    var b = el("button", "gl-link gl-goto" + (cls ? " " + cls : ""), text);
    b.type = "button";
    b.dataset.goto = String(pos);
    return b;
  }

  // how a link names a step: its node and its risk rank, the place in the review order (riskiest
  // first), worded so that it never reads as a step number
  var RANK_TITLE = "risk rank: this step's place in the review order, riskiest first (not its position in the trace)";
  function stepName(o, band) {
    return o.node + " (" + (band ? o.band + ", " : "") + "risk rank " + o.rank + ")";
  }

  function cascadeMark(r) {
    var box = el("div", "gl-casc-line");
    box.appendChild(el("span", "gl-casc", "\u21b3 carries flagged output of"));
    r.casc.forEach(function (pos) {
      var o = ROWS[pos];
      var b = linkTo(pos, stepName(o, false));
      b.title = "Go to the flagged step whose output this step's context carries; " + RANK_TITLE;
      box.appendChild(document.createTextNode(" "));
      box.appendChild(b);
    });
    return box;
  }

  // the flagged step a revision loop sent back, answered again by this one
  function revisionMark(r) {
    var box = el("div", "gl-casc-line");
    box.appendChild(el("span", "gl-rev", "\u21bb revision of"));
    var o = ROWS[r.rev];
    var b = linkTo(r.rev, stepName(o, false));
    b.title = "Go to the flagged answer this step answers again; " + RANK_TITLE;
    box.appendChild(document.createTextNode(" "));
    box.appendChild(b);
    return box;
  }

  function makeRow(it) {
    var r = it.r;
    var tr = el("tr", "gl-row gl-row-" + r.band);
    var d = tr.dataset;
    d.id = r.id; d.rank = String(r.rank); d.band = r.band; d.method = r.method; d.node = r.node;
    d.trace = r.trace; d.score = r.score === null ? "" : String(r.score);
    d.latency = r.latency === null ? "" : String(r.latency); d.index = String(r.index);
    if (r.casc.length) d.cascade = r.casc.map(function (p) { return ROWS[p].id; }).join(" ");
    var td = el("td");
    var tog = el("button", "gl-toggle");
    tog.type = "button"; tog.setAttribute("aria-expanded", "false"); tog.setAttribute("aria-label", "Details");
    td.appendChild(tog); tr.appendChild(td);
    tr.appendChild(el("td", "gl-c-rank", r.rank));
    td = el("td"); td.appendChild(badge(r.band)); tr.appendChild(td);
    td = el("td");
    if (r.norm) {
      td.appendChild(el("b", "gl-score", r.norm));
      var meter = el("span", "gl-meter"), bar = el("i", "gl-bg-" + r.band);
      bar.style.width = Math.round(Math.max(0, Math.min(1, r.score)) * 100) + "%";
      meter.appendChild(bar); td.appendChild(meter);
      td.appendChild(el("span", "gl-raw", r.raw));
      if (r.weak) td.appendChild(el("span", "gl-pill gl-weak", "no context: weak signal"));
    } else {
      td.appendChild(el("span", "gl-none", r.method === "error" ? "error" : "\u2013"));
    }
    tr.appendChild(td);
    td = el("td", "gl-c-node", r.node);
    if (r.kind !== "llm") { td.appendChild(document.createTextNode(" ")); td.appendChild(el("span", "gl-pill", r.kind)); }
    tr.appendChild(td);
    if (multi) tr.appendChild(el("td", "gl-c-trace", r.trace));
    td = el("td");
    td.appendChild(el("div", "gl-why gl-why-" + r.band, r.reason));
    if (r.casc.length) td.appendChild(cascadeMark(r));
    if (r.rev !== null && r.rev !== undefined) td.appendChild(revisionMark(r));
    td.appendChild(el("div", "gl-resp", r.response || ""));
    if (r.question) td.appendChild(el("div", "gl-q", "Q: " + r.question));
    if (r.note) td.appendChild(el("span", "gl-pill", r.note));
    tr.appendChild(td);
    tr.appendChild(el("td", "gl-c-model", r.model));
    tr.appendChild(el("td", "gl-num", r.tok));
    tr.appendChild(el("td", "gl-num", r.lat));
    tr.appendChild(el("td", "gl-num gl-c-index", r.step));
    return tr;
  }

  function rowOf(it) {
    if (!it.tr) { it.tr = makeRow(it); byRow.set(it.tr, it); }
    return it.tr;
  }

  // ------------------------------------------------------------ paging: only one page is in the DOM

  function render() {
    var s = performance.now();
    var pages = pageSize ? Math.max(1, Math.ceil(matched.length / pageSize)) : 1;
    if (page >= pages) page = pages - 1;
    var start = pageSize ? page * pageSize : 0;
    var end = pageSize ? Math.min(matched.length, start + pageSize) : matched.length;
    var frag = document.createDocumentFragment();
    for (var k = start; k < end; k++) {
      var it = matched[k];
      frag.appendChild(rowOf(it));
      if (it.detail && it.open) frag.appendChild(it.detail);
    }
    while (tbody.lastChild) tbody.removeChild(tbody.lastChild);
    tbody.appendChild(frag);
    $("gl-page").textContent = (matched.length ? start + 1 : 0) + "\u2013" + end + " of " + matched.length;
    $("gl-prev").disabled = page <= 0;
    $("gl-next").disabled = end >= matched.length;
    var shown = $("gl-shown");
    shown.textContent = matched.length + " of " + items.length + " match";
    shown.setAttribute("data-matched", String(matched.length));
    $("gl-none").hidden = matched.length > 0 || items.length === 0;
    timings.lastRender = performance.now() - s;
  }

  $("gl-prev").addEventListener("click", function () { page = Math.max(0, page - 1); render(); });
  $("gl-next").addEventListener("click", function () { page += 1; render(); });
  $("gl-page-size").addEventListener("change", function () { pageSize = +this.value; page = 0; render(); });

  // ------------------------------------------------------------ sorting

  function value(item, key) {
    if (key === "band") return BAND_RANK[item.band];
    return item[key];
  }

  function compare(a, b) {
    var key = sortState.key, dir = sortState.dir;
    var va = value(a, key), vb = value(b, key);
    if (va === null || va === undefined) return (vb === null || vb === undefined) ? a.rank - b.rank : 1;
    if (vb === null || vb === undefined) return -1;
    if (va < vb) return -dir;
    if (va > vb) return dir;
    return a.rank - b.rank;
  }

  function sortBy(key, dir) {
    var s = performance.now();
    sortState = { key: key, dir: dir };
    items.sort(compare);
    matched.sort(compare);
    page = 0;
    render();
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      if (!th.dataset.sort) return;
      th.setAttribute("aria-sort", th.dataset.sort === key ? (dir > 0 ? "ascending" : "descending") : "none");
    });
    timings.lastSort = performance.now() - s;
  }

  table.tHead.addEventListener("click", function (ev) {
    var th = ev.target.closest("th[data-sort]");
    if (!th) return;
    var key = th.dataset.sort;
    var dir = sortState.key === key ? -sortState.dir : DEFAULT_DIR[key] || 1;
    sortBy(key, dir);
  });

  // ------------------------------------------------------------ filters

  var form = $("gl-filters");
  var bandBoxes = Array.prototype.slice.call(form.querySelectorAll("input[name=band]"));
  var nodeSel = $("gl-f-node"), methodSel = $("gl-f-method"), traceSel = $("gl-f-trace"), textBox = $("gl-f-text");
  if (traceSel) {
    var opts = document.createDocumentFragment();
    TRACES.forEach(function (t) { var o = el("option", null, t.label); o.value = t.label; opts.appendChild(o); });
    traceSel.appendChild(opts);
  }

  function haystack(it) {
    if (it.hay === null) {
      var s = STEPS[it.i] || {};
      var parts = [it.node, it.trace, it.r.reason, s.q || "", s.r || "", s.err || "", s.skip || ""];
      (s.ctx || []).forEach(function (c) { parts.push(c[0], c[1]); });
      it.hay = parts.join("\n").toLowerCase();
    }
    return it.hay;
  }

  function applyFilters() {
    var s = performance.now();
    var bands = {};
    bandBoxes.forEach(function (b) { bands[b.value] = b.checked; });
    var node = nodeSel.value, method = methodSel.value, trace = traceSel ? traceSel.value : "";
    var text = textBox.value.trim().toLowerCase();
    matched = items.filter(function (it) {
      return bands[it.band] && (!node || it.node === node) && (!method || it.method === method) &&
        (!trace || it.trace === trace) && (!onlyCascade || it.r.casc.length > 0) &&
        (!text || haystack(it).indexOf(text) >= 0);
    });
    page = 0;
    render();
    if (multi) showFlow(trace ? traceIndex(trace) : -1);
    timings.lastFilter = performance.now() - s;
  }

  form.addEventListener("change", function () { onlyCascade = false; applyFilters(); });
  form.addEventListener("submit", function (ev) { ev.preventDefault(); });
  var typing = null;
  textBox.addEventListener("input", function () {
    clearTimeout(typing);
    typing = setTimeout(applyFilters, 120);
  });

  function resetFilters() {
    bandBoxes.forEach(function (b) { b.checked = true; });
    nodeSel.value = ""; methodSel.value = ""; textBox.value = "";
    if (traceSel) traceSel.value = "";
    onlyCascade = false;
  }
  $("gl-reset").addEventListener("click", function () { resetFilters(); applyFilters(); });

  function showTable() {
    var target = $("gl-h-steps");
    if (target && target.scrollIntoView) target.scrollIntoView({ block: "start" });
  }

  function traceIndex(label) {
    for (var k = 0; k < TRACES.length; k++) if (TRACES[k].label === label) return k;
    return -1;
  }

  // go to a row: show it whatever the filters, on its page, opened, highlighted
  function goTo(pos) {
    var it = byPos[pos];
    if (!it) return;
    resetFilters();
    if (traceSel) traceSel.value = it.trace;
    applyFilters();
    var k = matched.indexOf(it);
    if (pageSize && k >= 0) { page = Math.floor(k / pageSize); render(); }
    if (!it.open) toggle(it);
    it.tr.classList.add("gl-target");
    setTimeout(function () { it.tr.classList.remove("gl-target"); }, 2000);
    if (it.tr.scrollIntoView) it.tr.scrollIntoView({ block: "center" });
  }

  document.addEventListener("click", function (ev) {
    var go = ev.target.closest("[data-goto]");
    if (go) { ev.stopPropagation(); goTo(+go.dataset.goto); return; }
    var e = ev.target.closest("[data-filter-band],[data-filter-method],[data-filter-node],[data-filter-trace],[data-filter-cascade]");
    if (!e) return;
    resetFilters();
    var d = e.dataset;
    if (d.filterBand && d.filterBand !== "all") {
      bandBoxes.forEach(function (b) { b.checked = b.value === d.filterBand; });
    }
    if (d.filterMethod) methodSel.value = d.filterMethod;
    if (d.filterNode !== undefined) nodeSel.value = d.filterNode;
    if (d.filterTrace !== undefined && traceSel) traceSel.value = d.filterTrace;
    if (d.filterCascade) onlyCascade = true;
    applyFilters();
    if (!e.classList.contains("gl-card")) showTable();
  });

  // ------------------------------------------------------------ details, built on first expand

  function textBlock(title, text, note, cls) {
    var box = el("div", "gl-block " + (cls || ""));
    var h = el("h4", null, title);
    if (note) { h.appendChild(document.createTextNode(" ")); h.appendChild(el("span", "gl-pill", note)); }
    box.appendChild(h);
    box.appendChild(el("pre", "gl-text", text === "" ? "(empty)" : text));
    return box;
  }

  // the response, each sentence tinted by its support, unsupported tokens marked; hover a sentence
  // for its best passage, and the list below it shows every sentence's evidence
  function supportClass(v) { return v > 0.95 ? "gl-sup-hi" : (v >= 0.8 ? "gl-sup-mid" : "gl-sup-lo"); }

  // text[a, b) into parent: each failed finding's characters in a mark whose title says what the
  // source says (fm: [start, end, status, title]), unsupported words (unsup: [start, end]) marked
  // within; every piece of text goes in as a text node
  function markedText(parent, text, a, b, unsup, fm) {
    var cuts = [a, b];
    function cut(x) { if (x > a && x < b) cuts.push(x); }
    unsup.forEach(function (u) { cut(u[0]); cut(u[1]); });
    fm.forEach(function (f) { cut(f[0]); cut(f[1]); });
    cuts.sort(function (x, y) { return x - y; });
    var open = null, openF = null;
    for (var k = 0; k + 1 < cuts.length; k++) {
      var x = cuts[k], y = cuts[k + 1];
      if (x >= y) continue;
      var f = null, inUnsup = false;
      for (var i = 0; i < fm.length; i++) if (fm[i][0] <= x && y <= fm[i][1]) { f = fm[i]; break; }
      for (var j = 0; j < unsup.length; j++) if (unsup[j][0] <= x && y <= unsup[j][1]) { inUnsup = true; break; }
      if (f !== openF) {
        open = null; openF = f;
        if (f) {
          open = el("mark", "gl-finding gl-finding-" + f[2]);
          open.title = f[3];
          open.dataset.start = String(f[0]); open.dataset.end = String(f[1]);
          parent.appendChild(open);
        }
      }
      var piece = text.slice(x, y);
      (open || parent).appendChild(inUnsup ? el("mark", "gl-unsup", piece) : document.createTextNode(piece));
    }
  }

  // the context piece ([source, text, note, producer row]) a sentence's best passage lies in, or null
  function pieceOf(s, e) {
    var k = e[7];
    return (k === null || k === undefined || !s.ctx || !s.ctx[k]) ? null : s.ctx[k];
  }

  function evidenceBlock(s) {
    var text = s.r || "";
    var fm = s.fm || [];
    var ev = s.ev || [];
    var box = el("div", "gl-block gl-block-resp");
    var h = el("h4", null, "Response");
    if (s.rn) { h.appendChild(document.createTextNode(" ")); h.appendChild(el("span", "gl-pill", s.rn)); }
    h.appendChild(document.createTextNode(" "));
    h.appendChild(el("span", "gl-legend", (ev.length ? "each sentence tinted by support (share of its content words found in the context); marked words are not in the context" : "") +
      (fm.length ? (ev.length ? "; " : "") + "highlighted: a failed finding (hover it for what the source says)" : "")));
    box.appendChild(h);
    var pre = el("pre", "gl-text gl-resp-ev");
    var pos = 0;
    var list = el("ol", "gl-evidence");
    ev.forEach(function (e) {
      if (e[0] > pos) markedText(pre, text, pos, e[0], [], fm);
      var span = el("span", "gl-sent " + supportClass(e[2]) + (e[6] ? " gl-weakest" : ""));
      span.dataset.support = String(e[2]);
      var from = pieceOf(s, e);
      span.title = "support " + e[2].toFixed(2) + (e[6] ? " (weakest sentence)" : "") +
        "\nbest passage (similarity " + e[3].toFixed(2) + "): " + e[4] +
        (from ? "\nin context piece " + (e[7] + 1) + " (" + (from[0] || "context") + ")" : "");
      markedText(span, text, e[0], e[1], e[5], fm);
      pre.appendChild(span);
      pos = e[1];
      var li = el("li", "gl-ev " + supportClass(e[2]) + (e[6] ? " gl-weakest" : ""));
      li.appendChild(el("span", "gl-ev-sup", "support " + e[2].toFixed(2) + (e[6] ? " \u2190 weakest" : "")));
      li.appendChild(el("span", "gl-ev-sent", text.slice(e[0], e[1])));
      li.appendChild(el("span", "gl-ev-pass", "best passage (similarity " + e[3].toFixed(2) + "): " + e[4]));
      var c = pieceOf(s, e);
      if (c) {  // the context piece the passage lies in, and the step that produced it
        var where = el("span", "gl-ev-piece", "in context piece " + (e[7] + 1) + " (" + (c[0] || "context") + ")");
        if (c[3] !== null && c[3] !== undefined) { where.appendChild(document.createTextNode(" ")); where.appendChild(goButton(c[3], "from")); }
        li.appendChild(where);
      }
      list.appendChild(li);
    });
    if (pos < text.length) markedText(pre, text, pos, text.length, [], fm);
    box.appendChild(pre);
    if (!ev.length) return box;
    var det = el("details", "gl-ev-details");
    det.appendChild(el("summary", null, "Evidence for each sentence (" + ev.length + ")"));
    det.appendChild(list);
    box.appendChild(det);
    return box;
  }

  function goButton(pos, label) {
    var o = ROWS[pos];
    var b = linkTo(pos, (label ? label + ": " : "") + stepName(o, true));
    b.title = RANK_TITLE;
    return b;
  }

  function buildDetail(it) {
    var s = STEPS[it.i] || {};
    var r = it.r;
    var tr = el("tr", "gl-detail");
    var td = el("td");
    td.colSpan = ncols;
    var wrap = el("div", "gl-detail-grid");
    var main = el("div", "gl-detail-main");
    var side = el("div", "gl-detail-side");

    if (r.casc.length) {
      var cb = el("div", "gl-block gl-block-casc");
      cb.appendChild(el("h4", null, "Cascade"));
      var p = el("p", null, "This step's context carries the output of a flagged step. Its own band (" + r.band +
        ") is measured against that context, which already holds the error: review it with its origin. ");
      r.casc.forEach(function (pos) { p.appendChild(goButton(pos, "origin")); p.appendChild(document.createTextNode(" ")); });
      cb.appendChild(p);
      main.appendChild(cb);
    }
    if (s.err) main.appendChild(textBlock("Error", s.err, "", "gl-block-error"));
    if (s.skip) main.appendChild(textBlock("Skipped", s.skip, "", "gl-block-skip"));
    if (s.ex) main.appendChild(textBlock("Explanation", s.ex, "", "gl-block-ex"));
    if (s.ff && s.ff.length) {
      var fb = el("div", "gl-block");
      fb.appendChild(el("h4", null, "Facts checked (" + s.ff.length + ")"));
      var ul = el("ul", "gl-factlist");
      s.ff.forEach(function (f) {
        var li = el("li", "gl-fact gl-fact-" + f[0]);
        li.appendChild(el("span", "gl-fact-st", f[0]));
        li.appendChild(document.createTextNode(" " + f[1] + " "));
        li.appendChild(el("span", "gl-sub", f[2]));
        ul.appendChild(li);
      });
      fb.appendChild(ul);
      main.appendChild(fb);
    }
    main.appendChild(textBlock("Question", s.q || "", s.qn));
    var ctx = s.ctx || [];
    var cbox = el("div", "gl-block");
    cbox.appendChild(el("h4", null, "Context (" + ctx.length + (ctx.length === 1 ? " piece)" : " pieces)")));
    if (!ctx.length) cbox.appendChild(el("p", "gl-none", "No context: scored with DGI, or not scored."));
    ctx.forEach(function (c) {
      var piece = el("div", "gl-ctx");
      var head = el("div", "gl-ctx-src");
      head.appendChild(el("span", "gl-src", c[0] || "context"));
      if (c[2]) { head.appendChild(document.createTextNode(" ")); head.appendChild(el("span", "gl-pill", c[2])); }
      if (c[3] !== null && c[3] !== undefined) { head.appendChild(document.createTextNode(" ")); head.appendChild(goButton(c[3], "from")); }
      piece.appendChild(head);
      piece.appendChild(el("pre", "gl-text", c[1]));
      cbox.appendChild(piece);
    });
    main.appendChild(cbox);
    if ((s.ev && s.ev.length) || (s.fm && s.fm.length)) main.appendChild(evidenceBlock(s)); else main.appendChild(textBlock("Response", s.r || "", s.rn));

    var dl = el("dl", "gl-facts");
    (s.facts || []).forEach(function (f) {
      dl.appendChild(el("dt", null, f[0]));
      dl.appendChild(el("dd", null, f[1]));
    });
    side.appendChild(el("h4", null, "Details"));
    side.appendChild(dl);
    if (r.parent !== null && r.parent !== undefined) side.appendChild(goButton(r.parent, "parent"));
    if (s.meta) side.appendChild(textBlock("Metadata", s.meta, "", "gl-block-meta"));

    wrap.appendChild(main);
    wrap.appendChild(side);
    td.appendChild(wrap);
    tr.appendChild(td);
    return tr;
  }

  function toggle(it) {
    it.open = !it.open;
    if (it.open && !it.detail) {
      it.detail = buildDetail(it);
      if (it.tr.parentNode) it.tr.parentNode.insertBefore(it.detail, it.tr.nextSibling);
    }
    if (it.detail) it.detail.hidden = !it.open;
    it.tr.classList.toggle("gl-open", it.open);
    it.tr.querySelector(".gl-toggle").setAttribute("aria-expanded", it.open ? "true" : "false");
  }

  var byRow = new Map();
  tbody.addEventListener("click", function (ev) {
    var tr = ev.target.closest("tr.gl-row");
    if (!tr || !byRow.has(tr) || ev.target.closest("[data-goto]")) return;
    var sel = window.getSelection && window.getSelection();
    if (sel && String(sel) && !ev.target.closest(".gl-toggle")) return; // selecting text, not expanding
    toggle(byRow.get(tr));
  });

  // ------------------------------------------------------------ the flow of one trace

  var flowBox = $("gl-flow"), flowPanel = $("gl-flow-panel");
  var MAX_FLOW = 3000;

  function flowNode(pos) {
    var r = ROWS[pos];
    var li = el("li", "gl-fnode gl-fnode-" + r.band);
    var line = el("div", "gl-fline");
    line.appendChild(badge(r.band));
    line.appendChild(linkTo(pos, r.node, "gl-fname"));
    line.appendChild(el("span", "gl-pill", r.kind));
    if (r.norm) line.appendChild(el("span", "gl-fscore", r.norm));
    if (r.casc.length) {
      var c = el("span", "gl-casc", "\u21b3 carries flagged output of " + r.casc.map(function (p) { return ROWS[p].node; }).join(", "));
      line.appendChild(c);
    }
    line.appendChild(el("span", "gl-freason", r.reason));
    li.appendChild(line);
    return li;
  }

  function showFlow(t) {
    if (!flowPanel) return;
    if (t < 0) { flowPanel.hidden = multi; if (multi) return; t = 0; }
    flowPanel.hidden = false;
    var s = performance.now();
    var rows = byPos.filter(function (it) { return it.t === t; }).map(function (it) { return it.i; });
    rows.sort(function (a, b) { return ROWS[a].index - ROWS[b].index; });
    var inTrace = {};
    rows.forEach(function (p) { inTrace[p] = true; });
    var inputsOf = {}, usedBy = {}, kids = {}, roots = [];
    rows.forEach(function (p) {  // a tool or retriever result sits with the step that consumed it
      (STEPS[p].ctx || []).forEach(function (c) {
        var q = c[3];
        if (q === null || q === undefined || !inTrace[q] || usedBy[q] !== undefined) return;
        if (ROWS[q].kind === "tool" || ROWS[q].kind === "retrieval") { usedBy[q] = p; (inputsOf[p] = inputsOf[p] || []).push(q); }
      });
    });
    rows.forEach(function (p) {
      if (usedBy[p] !== undefined) return;
      var par = ROWS[p].parent;
      if (par !== null && par !== undefined && inTrace[par] && par !== p) (kids[par] = kids[par] || []).push(p);
      else roots.push(p);
    });
    var count = 0, seen = {};
    function build(list, cls) {
      var ul = el("ul", cls);
      list.forEach(function (p) {
        if (count >= MAX_FLOW || seen[p]) return;
        seen[p] = true; count++;
        var li = flowNode(p);
        if (inputsOf[p]) li.appendChild(build(inputsOf[p], "gl-finputs"));
        if (kids[p]) li.appendChild(build(kids[p], "gl-ftree"));
        ul.appendChild(li);
      });
      return ul;
    }
    while (flowBox.lastChild) flowBox.removeChild(flowBox.lastChild);
    flowBox.appendChild(build(roots, "gl-ftree gl-froot"));
    if (count >= MAX_FLOW) flowBox.appendChild(el("p", "gl-sub", "The first " + MAX_FLOW + " steps are shown."));
    $("gl-flow-name").textContent = TRACES[t] ? TRACES[t].label : "";
    timings.lastFlow = performance.now() - s;
  }

  // ------------------------------------------------------------ the index of traces

  var tRows = $("gl-t-rows");
  var tMatched = TRACES.map(function (t, k) { return k; });
  var tPage = 0, T_PAGE = 50;

  function traceRow(k) {
    var t = TRACES[k];
    var tr = el("tr", "gl-trow");
    tr.dataset.trace = t.label;
    var td = el("td");
    var b = el("button", "gl-link", t.label);
    b.type = "button"; b.dataset.filterTrace = t.label; b.title = "Show this trace's steps and flow";
    td.appendChild(b);
    if (t.status === "error") { td.appendChild(document.createTextNode(" ")); td.appendChild(badge("error")); }
    td.appendChild(el("div", "gl-sub", t.framework + (t.duration ? " \u00b7 " + t.duration : "")));
    tr.appendChild(td);
    tr.appendChild(el("td", null, t.started));
    tr.appendChild(el("td", "gl-num", t.steps));
    td = el("td");
    ["error", "flagged", "review", "trusted", "skipped"].forEach(function (band) {
      if (t.counts[band]) { td.appendChild(el("span", "gl-badge gl-band-" + band, t.counts[band] + " " + band)); td.appendChild(document.createTextNode(" ")); }
    });
    if (t.cascades) td.appendChild(el("span", "gl-casc", "\u21b3 " + t.cascades + " cascade"));
    tr.appendChild(td);
    td = el("td");
    if (t.worst !== null && t.worst !== undefined) {
      td.appendChild(goButton(t.worst, ""));
      td.appendChild(el("div", "gl-why", t.worst_reason));
    }
    tr.appendChild(td);
    return tr;
  }

  function renderIndex() {
    if (!tRows) return;
    var pages = Math.max(1, Math.ceil(tMatched.length / T_PAGE));
    if (tPage >= pages) tPage = pages - 1;
    var start = tPage * T_PAGE, end = Math.min(tMatched.length, start + T_PAGE);
    var frag = document.createDocumentFragment();
    for (var k = start; k < end; k++) frag.appendChild(traceRow(tMatched[k]));
    while (tRows.lastChild) tRows.removeChild(tRows.lastChild);
    tRows.appendChild(frag);
    $("gl-t-page").textContent = (tMatched.length ? start + 1 : 0) + "\u2013" + end + " of " + tMatched.length;
    $("gl-t-prev").disabled = tPage <= 0;
    $("gl-t-next").disabled = end >= tMatched.length;
    $("gl-t-shown").textContent = tMatched.length + " of " + TRACES.length;
    $("gl-t-shown").setAttribute("data-matched", String(tMatched.length));
  }

  function filterIndex() {
    var s = performance.now();
    var band = $("gl-t-band").value, fw = $("gl-t-fw") ? $("gl-t-fw").value : "";
    var text = $("gl-t-text").value.trim().toLowerCase();
    tMatched = [];
    for (var k = 0; k < TRACES.length; k++) {
      var t = TRACES[k];
      if (band === "cascade" ? !t.cascades : (band && !t.counts[band])) continue;
      if (fw && t.framework !== fw) continue;
      if (text && (t.label + "\n" + t.worst_node).toLowerCase().indexOf(text) < 0) continue;
      tMatched.push(k);
    }
    tPage = 0;
    renderIndex();
    timings.lastIndex = performance.now() - s;
  }

  if (tRows) {
    $("gl-t-filters").addEventListener("change", filterIndex);
    $("gl-t-filters").addEventListener("submit", function (ev) { ev.preventDefault(); });
    var tTyping = null;
    $("gl-t-text").addEventListener("input", function () { clearTimeout(tTyping); tTyping = setTimeout(filterIndex, 120); });
    $("gl-t-prev").addEventListener("click", function () { tPage = Math.max(0, tPage - 1); renderIndex(); });
    $("gl-t-next").addEventListener("click", function () { tPage += 1; renderIndex(); });
    window.__glFilterIndex = filterIndex;
    renderIndex();
  }

  render();
  if (!multi) showFlow(0);
  timings.init = performance.now() - t0;
  document.documentElement.setAttribute("data-gl-ready", "1");
})();
