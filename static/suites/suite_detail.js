// The suite page: drawn from the data in the page, then from /suites/N/data.json every 2 s while its runs train
// or its aggregates are being bootstrapped on a worker (suite_report.js draws).
const urls = document.getElementById("suite-urls").dataset;
let data = JSON.parse(document.getElementById("suite-data").textContent);
const POLL_MS = 2000;

function settled(current) {
  return !current.active && (current.aggregates.ready || !current.aggregates.tasks.length);
}

async function poll() {
  try {
    const response = await fetch(urls.data, {headers: {Accept: "application/json"}});
    if (response.ok) {
      data = await response.json();
      window.SuiteReport.draw(data);
      if (!data.active) document.getElementById("cancel-form")?.remove();
    }
  } catch (error) {
    // the server is restarting or the network is down: try again at the next tick
  }
  if (!settled(data)) setTimeout(poll, POLL_MS);
  else document.body.dataset.suiteSettled = "true";
}

document.getElementById("score-choice").addEventListener("change", (event) => event.target.form.submit());
window.SuiteReport.draw(data);
if (settled(data)) document.body.dataset.suiteSettled = "true";
else setTimeout(poll, POLL_MS);
