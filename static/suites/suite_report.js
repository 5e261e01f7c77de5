// A suite's report, drawn from its data (rlweb/suites/report.py: page_data): progress, the aggregates across tasks
// per algorithm (a table and an interval chart, as rliable draws them), the score table per environment and the
// run table. The suite's page draws it and draws it again on each poll (suite_detail.js); the downloaded HTML
// report has this script inline and draws it once, offline. A classic script: `window.SuiteReport.draw(data)`.
(function () {
  "use strict";

  const COLOURS = ["#3b6ed6", "#e07b39", "#2e9d5b", "#c0392b", "#8e5cc9", "#8a6212", "#d16ba5", "#4a5163"];

  function element(tag, text, attributes) {
    const made = document.createElement(tag);
    if (text !== undefined && text !== null) made.textContent = text;
    for (const [name, value] of Object.entries(attributes || {})) made.setAttribute(name, value);
    return made;
  }

  function number(value, digits) {
    if (typeof value !== "number" || !Number.isFinite(value)) return "–";
    const size = Math.abs(value);
    const places = digits !== undefined ? digits : size >= 1000 ? 0 : size >= 100 ? 1 : 2;
    return value.toFixed(places);
  }

  function progressText(data) {
    const counts = data.counts;
    const ended = ["succeeded", "failed", "cancelled", "lost", "pruned"].reduce((sum, key) => sum + (counts[key] || 0), 0);
    const parts = Object.entries(counts).filter(([, count]) => count).map(([state, count]) => `${count} ${state}`);
    return `${ended} of ${data.runs_total} runs ended` + (parts.length ? ` (${parts.join(", ")})` : "") + ".";
  }

  function drawAggregateTable(data, table) {
    const found = data.aggregates;
    const head = element("tr");
    head.append(element("th", "Algorithm"), ...found.metrics.map((metric) => element("th", found.labels[metric])));
    const rows = Object.entries(found.algorithms || {}).map(([algorithm, values]) => {
      const tr = element("tr", null, {"data-algorithm": algorithm});
      tr.append(element("td", algorithm));
      for (const metric of found.metrics) {
        const [point, low, high] = values[metric];
        const cell = element("td", null, {"data-metric": metric, class: "number"});
        cell.append(element("strong", number(point, 3)), " ", element("span", `[${number(low, 3)}, ${number(high, 3)}]`, {class: "muted"}));
        tr.append(cell);
      }
      return tr;
    });
    table.querySelector("thead").replaceChildren(head);
    table.querySelector("tbody").replaceChildren(...rows);
  }

  function aggregateNote(data) {
    const found = data.aggregates;
    const left = Object.entries(found.left_out).map(([env, why]) => `${env} (${why})`);
    if (!found.tasks.length) {
      return "No aggregates yet: they need every algorithm's score on each seed of at least one environment with " +
        "reference scores." + (left.length ? ` Left out: ${left.join("; ")}.` : "");
    }
    const runs = [...new Set(Object.values(found.runs_per_task))].join(" or ");
    let text = `Over ${found.tasks.length} task${found.tasks.length === 1 ? "" : "s"} (${found.tasks.join(", ")}), ` +
      `${runs} run${runs === "1" ? "" : "s"} each, scores normalised per task; ${data.score_label} of each run. `;
    text += found.ready ? `95% stratified bootstrap intervals, ${found.reps.toLocaleString()} resamples.`
      : "Computing the bootstrap intervals on a worker…";
    if (left.length) text += ` Left out: ${left.join("; ")}.`;
    return text;
  }

  function drawAggregateChart(data, chart) {
    const found = data.aggregates;
    if (typeof Plotly === "undefined" || !found.ready) return;
    const algorithms = Object.keys(found.algorithms);
    const traces = [];
    const layout = {height: 90 + 34 * algorithms.length, margin: {l: 110, r: 20, t: 40, b: 40}, showlegend: false,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", annotations: []};
    const gap = 0.06;
    const width = (1 - gap * (found.metrics.length - 1)) / found.metrics.length;
    found.metrics.forEach((metric, index) => {
      const axis = index === 0 ? "" : String(index + 1);
      const start = index * (width + gap);
      layout[`xaxis${axis}`] = {domain: [start, start + width], zeroline: false, gridcolor: "#e3e6ec",
        title: {text: "normalised score", font: {size: 11}}};
      layout[`yaxis${axis}`] = {anchor: `x${axis}`, showticklabels: index === 0, automargin: true,
        categoryorder: "array", categoryarray: algorithms.slice().reverse()};
      layout.annotations.push({text: `<b>${found.labels[metric]}</b>`, x: start + width / 2, y: 1.0, xref: "paper",
        yref: "paper", yanchor: "bottom", showarrow: false});
      algorithms.forEach((algorithm, position) => {
        const [point, low, high] = found.algorithms[algorithm][metric];
        traces.push({type: "scatter", mode: "markers", x: [point], y: [algorithm], xaxis: `x${axis}`, yaxis: `y${axis}`,
          marker: {color: COLOURS[position % COLOURS.length], size: 9, symbol: "line-ns", line: {width: 3,
            color: COLOURS[position % COLOURS.length]}},
          error_x: {type: "data", symmetric: false, array: [high - point], arrayminus: [point - low], thickness: 10,
            width: 0, color: COLOURS[position % COLOURS.length] + "66"},
          name: algorithm, hovertemplate: `${algorithm}: %{x:.3f} [${number(low, 3)}, ${number(high, 3)}]<extra>${found.labels[metric]}</extra>`});
      });
    });
    Plotly.react(chart, traces, layout, {displayModeBar: false, responsive: true});
  }

  function drawScoreTable(data, table) {
    const head = element("tr");
    head.append(element("th", "Environment"), ...data.suite.algorithms.map((name) => element("th", name, {class: "number"})));
    const rows = data.table.map((row) => {
      const tr = element("tr", null, {"data-env": row.env_id});
      const env = element("td");
      env.append(element("code", row.env_id));
      if (row.reference) env.append(element("br"), element("span", row.reference.text, {class: "muted reference"}));
      else env.append(" ", element("span", "no reference scores: left out of the aggregates", {class: "muted reference"}));
      tr.append(env);
      for (const algorithm of data.suite.algorithms) {
        const cell = row.cells[algorithm];
        const td = element("td", null, {class: "number"});
        if (cell.n) {
          td.append(`${number(cell.mean)} ± ${number(cell.std)}`, " ", element("span", `(${cell.n})`, {class: "muted"}));
          if (cell.normalised !== null) td.append(element("br"), element("span", `normalised ${number(cell.normalised, 3)}`, {class: "muted"}));
        } else {
          td.textContent = "–";
        }
        tr.append(td);
      }
      return tr;
    });
    table.querySelector("thead").replaceChildren(head);
    table.querySelector("tbody").replaceChildren(...rows);
    const sources = [...new Set(data.table.flatMap((row) => row.reference ? row.reference.sources : []))];
    const list = document.getElementById("reference-sources");
    list.replaceChildren(...sources.map((source) => element("li", source)));
    list.hidden = !sources.length;
  }

  function drawRunTable(data, table, links) {
    const rows = data.runs.map((run) => {
      const tr = element("tr", null, {"data-run-id": run.id, "data-status": run.status});
      const name = element("td");
      name.append(links ? element("a", `#${run.id}`, {href: run.url}) : `#${run.id}`);
      const status = element("td");
      status.append(element("span", run.status, {class: `status status-${run.status}`}));
      const progress = element("td");
      const bar = element("progress", null, {max: "100", value: String(run.progress)});
      progress.append(bar, " ", element("span", `${run.progress}%`, {class: "muted"}));
      tr.append(name, element("td", run.algorithm), element("td", run.env_id), element("td", String(run.seed)), status,
        progress, element("td", number(run.latest_eval), {class: "number"}),
        element("td", number(run.score), {class: "number score"}), element("td", number(run.normalised, 3), {class: "number"}));
      return tr;
    });
    table.querySelector("tbody").replaceChildren(...rows);
  }

  function draw(data, options) {
    const links = !options || options.links !== false;
    const status = document.getElementById("suite-status");
    status.textContent = data.suite.status;
    status.className = `status status-${data.suite.status}`;
    document.getElementById("suite-progress").textContent = progressText(data);
    const table = document.getElementById("aggregate-table");
    table.hidden = !data.aggregates.ready;
    if (data.aggregates.ready) drawAggregateTable(data, table);
    document.getElementById("aggregate-note").textContent = aggregateNote(data);
    const chart = document.getElementById("aggregate-chart");
    chart.hidden = !data.aggregates.ready;
    drawAggregateChart(data, chart);
    drawScoreTable(data, document.getElementById("score-table"));
    drawRunTable(data, document.getElementById("run-table"), links);
  }

  window.SuiteReport = {draw: draw};
})();
