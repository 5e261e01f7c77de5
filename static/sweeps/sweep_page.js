// What the sweep page (sweep_detail.js) and the population page (pbt_detail.js) share: the status and cancel form,
// the data from /sweeps/N/data.json polled every 3 s while the sweep runs, and the figures from
// /sweeps/N/figures.json, fetched again when the data's `version` changes. Each page shows the rest of the data.
const urls = document.getElementById("sweep-urls").dataset;

export function element(tag, text, attributes = {}) {
  const made = document.createElement(tag);
  if (text !== undefined && text !== null) made.textContent = text;
  for (const [name, value] of Object.entries(attributes)) made.setAttribute(name, value);
  return made;
}

export function number(value, digits = 2) {
  return typeof value === "number" && Number.isFinite(value) ? value.toFixed(digits) : "–";
}

function showStatus(data) {
  const status = document.getElementById("sweep-status");
  status.textContent = data.status;
  status.className = `status status-${data.status}`;
  const cancel = document.getElementById("cancel-form");
  if (cancel && data.status !== "running") cancel.remove();
}

// Shows the page's embedded data with `show` (after the status), draws the figures named `charts` (each in
// #chart-NAME) and, while the sweep runs, polls for more.
export function follow(charts, show) {
  let figuresVersion = null;

  async function drawFigures() {
    const response = await fetch(urls.figures, {headers: {Accept: "application/json"}});
    if (!response.ok) return;
    const figures = await response.json();
    for (const name of charts) {
      const target = document.getElementById(`chart-${name}`);
      const figure = figures[name];
      if (!figure || figure.message) {
        if (target.dataset.drawn) Plotly.purge(target);
        target.dataset.drawn = "";
        target.replaceChildren(element("p", figure ? figure.message : "", {class: "chart-message"}));
        continue;
      }
      if (!target.dataset.drawn) target.replaceChildren();
      await Plotly.react(target, figure.data, figure.layout, {responsive: true, displaylogo: false});
      target.dataset.drawn = "1";
    }
    document.body.dataset.figuresDrawn = figuresVersion;
  }

  async function update(data) {
    showStatus(data);
    show(data);
    if (data.version !== figuresVersion) {
      figuresVersion = data.version;
      await drawFigures();
    }
    return data.status === "running";
  }

  async function poll() {
    try {
      const response = await fetch(urls.data, {headers: {Accept: "application/json"}});
      if (response.ok && !(await update(await response.json()))) return;
    } catch (error) {
      // the server is restarting: try again at the next tick
    }
    setTimeout(poll, 3000);
  }

  const first = JSON.parse(document.getElementById("sweep-data").textContent);
  update(first).then((running) => { if (running) setTimeout(poll, 3000); });
}
