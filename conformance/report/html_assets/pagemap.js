/* report.html: page maps drawn from the JSON that conformance/report/pagemap.py wrote into report.json.
 *
 * One strip per request, in positions at the engine's page size (a peer server's: its blocks):
 * pages, the input and generated tokens, media items with the page boundaries inside them, what
 * the oracle expects reused and what the backend reported (the prefill computes the rest), the
 * records published at prefill end and decode end, and a red line at the first position where
 * the two differ, whose page is marked. Nothing here decides a count: every number is read from
 * the map. A case's map is drawn when the case is opened.
 */
(function () {
  "use strict";
  var node = document.getElementById("kv-pagemaps");
  var MAPS = node ? JSON.parse(node.textContent || "{}") : {};
  var W = 960, LABEL = 196, ROW = 15, GAP = 5, RIGHT = 8, MAX_CELLS = 480;

  function esc(v) {
    return String(v === null || v === undefined ? "" : v).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function isInt(v) { return typeof v === "number" && isFinite(v) && Math.floor(v) === v; }
  function show(v) { return v === null || v === undefined ? "—" : (typeof v === "object" ? JSON.stringify(v) : String(v)); }
  function fact(f, key) { return f && Object.prototype.hasOwnProperty.call(f, key) ? f[key] : undefined; }

  /* --- one strip ------------------------------------------------------------------------------ */
  function Strip(extent) {
    this.extent = Math.max(1, extent);
    this.scale = (W - LABEL - RIGHT) / this.extent;
    this.y = 14;
    this.parts = [];
    this.late = [];
  }
  Strip.prototype.x = function (p) { return LABEL + Math.min(p, this.extent) * this.scale; };
  Strip.prototype.label = function (text, cls) {
    this.parts.push('<text class="lbl ' + (cls || "") + '" x="4" y="' + (this.y + ROW - 4) + '">' + esc(text) + "</text>");
  };
  Strip.prototype.rect = function (p0, p1, cls, title, text, attrs) {
    if (!(p1 > p0)) return;
    var x0 = this.x(p0), w = Math.max(1, this.x(p1) - x0);
    var s = '<rect class="' + cls + '" x="' + x0.toFixed(1) + '" y="' + this.y + '" width="' + w.toFixed(1) +
      '" height="' + ROW + '"' + (attrs || "") + ">" + (title ? "<title>" + esc(title) + "</title>" : "") + "</rect>";
    if (text && w > 7 * String(text).length) {
      s += '<text class="in" x="' + (x0 + 3).toFixed(1) + '" y="' + (this.y + ROW - 4) + '">' + esc(text) + "</text>";
    }
    this.parts.push(s);
  };
  Strip.prototype.mark = function (p, cls, title) {
    var x = this.x(p).toFixed(1);
    this.parts.push('<line class="' + cls + '" x1="' + x + '" x2="' + x + '" y1="' + (this.y - 2) + '" y2="' +
      (this.y + ROW + 2) + '">' + (title ? "<title>" + esc(title) + "</title>" : "") + "</line>");
  };
  Strip.prototype.down = function (p, cls, title) {          /* a line from this row to the strip's bottom */
    this.late.push([this.x(p).toFixed(1), this.y - 2, cls, title]);
  };
  Strip.prototype.next = function () { this.y += ROW + GAP; };
  Strip.prototype.cells = function (size, unit, diffPage) {
    var count = Math.ceil(this.extent / size), every = Math.max(1, Math.ceil(count / MAX_CELLS));
    for (var k = 0; k < count; k += every) {
      var last = Math.min(k + every, count);
      var title = unit + (every > 1 ? "s " + k + "-" + (last - 1) : " " + k) + ": positions " + (k * size) + "-" +
        (Math.min(last * size, this.extent) - 1);
      var w = (this.x(last * size) - this.x(k * size));
      this.rect(k * size, last * size, "pg " + ((k / every) % 2 ? "odd" : "even"), title,
        w > 9 * String(k).length ? String(k) : "", ' data-page="' + k + '"');
    }
    if (isInt(diffPage)) {
      this.rect(diffPage * size, Math.min((diffPage + 1) * size, this.extent), "pg diff-page",
        "first differing " + unit + ": " + diffPage, String(diffPage), ' data-page="' + diffPage + '"');
    }
  };
  Strip.prototype.svg = function (diff, aria) {
    var h = this.y + 6, top = "";
    this.late.forEach(function (l) {
      top += '<line class="' + l[2] + '" x1="' + l[0] + '" x2="' + l[0] + '" y1="' + l[1] + '" y2="' + (h - 4) + '"><title>' +
        esc(l[3]) + "</title></line>";
    });
    if (diff && isInt(diff.position)) {
      var x = this.x(diff.position).toFixed(1);
      top += '<line class="first-diff" x1="' + x + '" x2="' + x + '" y1="2" y2="' + (h - 2) + '"><title>first difference: ' +
        esc(diff.what) + " at position " + diff.position + "</title></line>";
    }
    return '<svg class="strip" viewBox="0 0 ' + W + " " + h + '" width="' + W + '" height="' + h + '" role="img" aria-label="' +
      esc(aria) + '">' + this.parts.join("") + top + "</svg>";
  };

  /* --- a request of a request file (unit: page) ------------------------------------------------ */
  function pubsOf(f) { var p = fact(f, "publications"); return Array.isArray(p) ? p : []; }
  function reuseRow(s, who, f, n, cls, diff) {
    var r = fact(f, "reused_tokens"), m = fact(f, "matched_tokens");
    if (!f) { s.label(who + ": not reported", "muted"); s.next(); return; }
    s.label(who + " reused " + show(r) + (isInt(m) && m !== r ? " (matched " + m + ")" : ""), "reuse-" + cls);
    if (isInt(r)) {
      s.rect(0, r, "reused " + cls, who + " reuses positions 0-" + (r - 1), "reused " + r);
      if (isInt(n)) s.rect(r, n, "computed", who + ": the prefill computes positions " + r + "-" + (n - 1), "computed " + (n - r));
    }
    if (isInt(m) && m !== r) s.mark(m, "matched", who + " matched " + m);
    if (diff && isInt(diff.expected) && isInt(diff.observed) && /_tokens$/.test(diff.what)) {
      s.rect(Math.min(diff.expected, diff.observed), Math.max(diff.expected, diff.observed), "mismatch",
        diff.what + ": the oracle " + diff.expected + ", the backend " + diff.observed);
    }
    s.next();
  }
  function pubText(p) {
    return p ? show(p.point) + ": " + show(p.pages) + " page(s), " + show(p.tokens) + " tokens, " + show(p.status) : "—";
  }
  function requestStrip(pm, r) {
    var P = pm.size, e = r.expected, o = r.observed, n = r.n, g = isInt(r.generated) ? r.generated : 0;
    var ends = [n + Math.max(0, g - 1), r.observed_n || 0];
    [e, o].forEach(function (f) {
      ["reused_tokens", "matched_tokens"].forEach(function (k) { if (isInt(fact(f, k))) ends.push(fact(f, k)); });
      pubsOf(f).forEach(function (p) { if (isInt(p.tokens)) ends.push(p.tokens); });
    });
    var s = new Strip(Math.max.apply(null, ends.filter(isInt)));
    var diff = r.first_difference;
    s.label("pages · P = " + P);
    s.cells(P, "page", diff ? diff.page : null);
    s.next();
    s.label("input n = " + n + (g ? " · generated " + g : ""));
    s.rect(0, n, "input", "input positions 0-" + (n - 1), "input");
    if (g > 1) s.rect(n, n + g - 1, "generated", "generated tokens fed back: positions " + n + "-" + (n + g - 2), "gen");
    s.next();
    if (r.media && r.media.length) {
      s.label("media");
      r.media.forEach(function (m) {
        s.rect(m.start, m.end, "media m-" + esc(m.modality) + " d" + (parseInt(m.digest, 16) % 6),
          m.modality + " #" + m.item + " (" + m.digest + ") at positions " + m.start + "-" + (m.end - 1),
          m.modality + " #" + m.item);
        (m.splits || []).forEach(function (b) {
          s.down(b, "split", "CR-MEDIA-3: the page boundary at " + b + " splits " + m.modality + " #" + m.item +
            (r.trim ? "; " + r.trim.why : ""));
        });
      });
      s.next();
    }
    reuseRow(s, "oracle", e, n, "exp");
    reuseRow(s, "backend", o, isInt(r.observed_n) ? r.observed_n : n, "obs", diff);
    var points = [];
    pubsOf(e).concat(pubsOf(o)).forEach(function (p) { if (points.indexOf(p.point) < 0) points.push(p.point); });
    points.forEach(function (point) {
      [["oracle", e, "exp"], ["backend", o, "obs"]].forEach(function (side) {
        var list = pubsOf(side[1]).filter(function (p) { return p.point === point; });
        s.label(side[0] + " " + point + (list.length ? " " + list.map(function (p) { return show(p.pages); }).join("+") + " pg" : ": none"), "pub-" + side[2]);
        list.forEach(function (p) {
          if (isInt(p.tokens)) s.rect(0, p.tokens, "pub " + side[2] + " st-" + esc(p.status), side[0] + " publishes " + pubText(p), show(p.status));
        });
        s.next();
      });
    });
    return s.svg(diff, "page map of request " + r.request);
  }
  function factsTable(pm, r) {
    var e = r.expected, o = r.observed, rows = [];
    function row(name, a, b) {
      var differs = o !== null && o !== undefined && JSON.stringify(a) !== JSON.stringify(b);
      rows.push('<tr class="' + (differs ? "differs" : "") + '" data-fact="' + esc(name) + '"><th>' + esc(name) + '</th><td class="exp">' +
        esc(show(a)) + '</td><td class="obs">' + esc(o ? show(b) : "not reported") + "</td></tr>");
    }
    ["plan", "matched_tokens", "reused_tokens"].forEach(function (k) { row(k, fact(e, k), fact(o, k)); });
    var re = fact(e, "reused_tokens"), ro = fact(o, "reused_tokens"), no = isInt(r.observed_n) ? r.observed_n : r.n;
    row("prefill computes", isInt(re) ? re + "-" + (r.n - 1) : undefined, isInt(ro) ? ro + "-" + (no - 1) : undefined);
    ["lookup_bypass", "media_aware", "forced_cold", "hybrid_restore"].forEach(function (k) {
      if (fact(e, k) !== undefined || fact(o, k) !== undefined) row(k, fact(e, k), fact(o, k));
    });
    var pe = pubsOf(e), po = pubsOf(o);
    for (var k = 0; k < Math.max(pe.length, po.length); k++) row("publications[" + k + "]", pubText(pe[k]), pubText(po[k]));
    return '<table class="facts"><thead><tr><th></th><th>oracle</th><th>backend</th></tr></thead><tbody>' + rows.join("") + "</tbody></table>";
  }

  /* --- a request of a peer case (unit: block, page or token) ----------------------------------- */
  function peerStrip(pm, r) {
    var B = pm.size, n = r.n, diff = r.first_difference;
    var s = new Strip(Math.max(n || 0, r.predicted || 0, r.reported || 0));
    s.label(pm.unit + "s · " + (pm.unit === "token" ? "1 token" : "size " + B));
    s.cells(B, pm.unit, diff ? diff.page : null);
    s.next();
    s.label("prompt N = " + show(n));
    if (isInt(n)) s.rect(0, n, "input", "prompt positions 0-" + (n - 1), "prompt");
    if (isInt(r.cap)) s.down(r.cap, "cap", "the most that may be cached: " + r.cap + " (N - 1 = " + (n - 1) + ")");
    if (isInt(n) && n - 1 !== r.cap) s.mark(n - 1, "n-1", "N - 1 = " + (n - 1) + ": the last prompt token is always computed");
    s.next();
    [["oracle cached", r.predicted, "exp"], ["server cached", r.reported, "obs"]].forEach(function (side) {
      s.label(side[0] + " " + show(side[1]), "reuse-" + side[2]);
      if (isInt(side[1])) {
        s.rect(0, side[1], "reused " + side[2], side[0] + ": positions 0-" + (side[1] - 1), String(side[1]));
        if (isInt(n)) s.rect(side[1], n, "computed", "computed: positions " + side[1] + "-" + (n - 1));
      }
      s.next();
    });
    return s.svg(diff, "block map of request " + r.request);
  }
  function peerTable(pm, r) {
    var rows = [["prompt tokens N", r.n, r.n], ["cached tokens", r.predicted, r.reported], ["cap (full match)", r.cap, r.cap]];
    return '<table class="facts"><thead><tr><th></th><th>oracle</th><th>server</th></tr></thead><tbody>' +
      rows.map(function (x, i) {
        var differs = i === 1 && isInt(x[2]) && x[1] !== x[2];
        return '<tr class="' + (differs ? "differs" : "") + '" data-fact="' + esc(x[0]) + '"><th>' + esc(x[0]) +
          '</th><td class="exp">' + esc(show(x[1])) + '</td><td class="obs">' + esc(show(x[2])) + "</td></tr>";
      }).join("") + "</tbody></table>";
  }

  /* --- a case ------------------------------------------------------------------------------- */
  function head(pm, r) {
    var bits = ["request " + r.request];
    if (pm.unit === "page") {
      if (r.batch !== null && r.batch !== undefined) bits.push("batch " + r.batch);
      bits.push("n = " + r.n + " (" + Math.ceil(r.n / pm.size) + " page(s) of " + pm.size + ")");
      bits.push("adapter " + (r.lora || "none"));
      (r.media || []).forEach(function (m) { bits.push(m.modality + " #" + m.item + " at " + m.start + "-" + (m.end - 1)); });
      if (r.status && r.status !== "ok") bits.push("batch fails: " + r.error);
      if (r.outputs_defined === false) bits.push("outputs not defined by the profile");
      if (r.rules && r.rules.length) bits.push("fails " + r.rules.join(", "));
    } else {
      var f = r.fields || {};
      Object.keys(f).forEach(function (k) { bits.push(k + " " + show(f[k])); });
    }
    var d = r.first_difference;
    if (d) bits.push("first difference: " + d.what + (isInt(d.position) ? " at position " + d.position + ", " + pm.unit + " " + d.page : ""));
    return '<p class="req-head">' + esc(bits.join(" · ")) + "</p>";
  }
  function stepsList(r) {
    /* the oracle's deciding step of each fact (its decision trace), as report.json has it */
    var steps = r.steps || [];
    if (!steps.length) return "";
    return '<ul class="steps">' + steps.map(function (st) {
      return '<li data-value="' + esc(st.value) + '"><code>' + esc(st.rule || "input") + "</code> " + esc(st.value) +
        ": " + esc(st.why) + "</li>";
    }).join("") + "</ul>";
  }
  function request(pm, r) {
    var d = r.first_difference;
    return '<div class="req' + (d ? " differs" : "") + '" data-request="' + esc(r.request) + '"' +
      (d && isInt(d.page) ? ' data-first-page="' + d.page + '"' : "") + ">" + head(pm, r) +
      (pm.unit === "page" ? requestStrip(pm, r) + factsTable(pm, r) + stepsList(r) : peerStrip(pm, r) + peerTable(pm, r)) +
      "</div>";
  }
  function fileLine(pm) {
    var bits = [];
    if (pm.unit === "page") {
      var en = pm.engine || {}, po = pm.policy || {};
      bits.push("P = " + pm.size + " tokens per page", "engine " + show(en.kind) + ", pool " + show(en.pool_pages) + " pages",
        "lookup " + show(po.lookup), "commit " + show(po.commit), "max records " + show(po.max_records));
      if (po.hidden_state_output) bits.push("hidden-state output (every request bypasses lookup)");
      if (po.warmup) bits.push("warmup " + po.warmup);
      if (po.context_reuse === false) bits.push("context reuse disabled");
      var pf = pm.prefill;
      if (pf) {
        var side = function (x) { return x ? "computed " + show(x.computed_tokens) + ", reused " + show(x.reused_tokens) + ", runs " + show(x.total_runs) : "not written"; };
        bits.push("prefill profile: oracle " + side(pf.expected) + "; backend " + side(pf.observed));
      }
    } else {
      bits.push("peer profile " + show(pm.profile), pm.unit + " size " + pm.size);
    }
    var items = pm.unit === "page"
      ? [["exp", "oracle reused"], ["obs", "backend reused"], ["computed", "computed by the prefill"], ["media", "media item"],
         ["split", "page boundary inside an item"], ["pub", "record published"], ["diff", "first difference"]]
      : [["exp", "oracle cached"], ["obs", "server cached"], ["computed", "computed"], ["cap", "the most a count may be"],
         ["n-1", "N - 1"], ["diff", "first difference"]];
    var legend = items.map(function (x) { return '<span><i class="' + x[0] + '"></i>' + esc(x[1]) + "</span>"; }).join("");
    return '<p class="file-line">' + esc(bits.join(" · ")) + '</p><p class="legend">' + legend + "</p>";
  }
  function draw(box) {
    if (box.getAttribute("data-drawn")) return;
    var pm = MAPS[box.getAttribute("data-case")];
    box.setAttribute("data-drawn", "1");
    if (!pm) { box.innerHTML = '<p class="note">No page map in report.json for this case.</p>'; return; }
    var verdict = box.closest(".case").getAttribute("data-verdict");
    var reqs = pm.requests || [];
    var first = reqs, rest = [];
    if (verdict !== "PASS" && verdict !== "NOT_SUPPORTED") {
      first = reqs.filter(function (r) { return r.first_difference || (r.rules && r.rules.length); });
      if (!first.length) first = reqs;
      rest = reqs.filter(function (r) { return first.indexOf(r) < 0; });
    }
    var html = fileLine(pm) + first.map(function (r) { return request(pm, r); }).join("");
    if (rest.length) html += '<button type="button" class="more-requests">show the other ' + rest.length + " request(s)</button>";
    if (pm.omitted_requests) html += '<p class="note">' + pm.omitted_requests + " more request(s) not drawn (report.json keeps the first " + reqs.length + ").</p>";
    box.innerHTML = html;
    var button = box.querySelector(".more-requests");
    if (button) button.addEventListener("click", function () {
      var div = document.createElement("div");
      div.innerHTML = rest.map(function (r) { return request(pm, r); }).join("");
      button.replaceWith(div);
    });
  }
  function drawOpen(details) {
    if (details.open) details.querySelectorAll(":scope > .case-body > .pagemap").forEach(draw);
  }

  document.querySelectorAll("details.case").forEach(function (d) {
    d.addEventListener("toggle", function () { drawOpen(d); });
    drawOpen(d);
  });
  var only = document.getElementById("only-problems");
  if (only) only.addEventListener("change", function () {
    document.getElementById("cases").classList.toggle("only-problems", only.checked);
  });
  var all = document.getElementById("open-all");
  if (all) all.addEventListener("click", function () {
    document.querySelectorAll("details.section").forEach(function (d) { d.open = true; });
  });
  document.documentElement.setAttribute("data-pagemaps", "ready");
})();
