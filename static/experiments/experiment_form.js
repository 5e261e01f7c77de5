// The experiment form. The hyperparameter fields belong to the chosen algorithm: choosing another one
// reloads the new-experiment form with that algorithm's fields, keeping what was typed above them (also on
// a clone, whose form posts to the same address). They start from the preset the algorithm has for the
// environment: a change of environment, or the buttons that switch between the preset and the plain
// defaults, ask /experiments/preset.json and fill in the fields the user has not changed, in place.
const algorithm = document.getElementById("id_algorithm");
const form = algorithm ? algorithm.form : null;
const environment = document.getElementById("id_env_id");
const note = document.getElementById("preset-note");
const presetField = document.getElementById("id_preset");
const totalSteps = document.getElementById("id_total_steps");
const nameField = document.getElementById("id_name");

function nameIsTheDefault() {  // "CartPole DQN" until the user types a name: it follows the algorithm and env
  return nameField && nameField.value === nameField.dataset.defaultName;
}

function reloadWithTheAlgorithm() {
  const query = new URLSearchParams();
  for (const field of form.elements) {
    if (!field.name || field.name.startsWith("hp_") || field.name === "csrfmiddlewaretoken" ||
        field.name === "submission_token" || field.name === "preset") continue;
    if (field === nameField && nameIsTheDefault()) continue;  // the page names it after the new algorithm
    // an empty value is how the page reads an unticked box back
    query.set(field.name, field.type === "checkbox" ? (field.checked ? "on" : "") : field.value);
  }
  window.location.assign(`${new URL(form.action).pathname}?${query}`);
}

function changedByTheUser(field) {
  if (field.type === "checkbox") return field.checked !== field.defaultChecked;
  if (field.tagName === "SELECT") return [...field.options].some((option) => option.selected !== option.defaultSelected);
  return field.value !== field.defaultValue;
}

function show(field, value) {  // the new starting value, which later changes are measured against
  if (field.type === "checkbox") {
    field.checked = field.defaultChecked = value === true;
  } else if (field.tagName === "SELECT") {
    for (const option of field.options) option.selected = option.defaultSelected = option.value === value;
  } else {
    field.value = field.defaultValue = value;
  }
}

function element(tag, text, attributes = {}) {
  const made = document.createElement(tag);
  if (text) made.textContent = text;
  for (const [name, value] of Object.entries(attributes)) made.setAttribute(name, value);
  return made;
}

function describe(answer) {
  const name = note.dataset.algorithm;
  const line = element("p", "", {class: "preset-note"});
  if (answer.preset) {
    line.append("Filled in from ", element("strong", answer.preset.description), " ",
                element("span", `(${answer.preset.source})`, {class: "muted"}), "; the values you change are kept. ",
                element("button", `Use ${name}'s plain defaults`, {type: "button", class: "link-button", "data-preset": "none"}));
  } else {
    line.append(`${name}'s own defaults (tuned for CartPole or Pendulum). `);
    if (answer.available) {
      line.append(element("button", `Use ${answer.available.description}`,
                          {type: "button", class: "link-button", "data-preset": "auto"}));
    }
  }
  const parts = [line];
  const unmapped = answer.preset ? Object.entries(answer.preset.no_equivalent) : [];
  if (unmapped.length) {
    const details = element("details", "", {class: "preset-unmapped"});
    details.append(element("summary", `Settings of the source with no equivalent here (${unmapped.length})`));
    const list = element("ul");
    for (const [key, reason] of unmapped) {
      const item = element("li");
      item.append(element("code", key), `: ${reason}`);
      list.append(item);
    }
    details.append(list);
    parts.push(details);
  }
  note.replaceChildren(...parts);
}

let asked = 0;
async function startFrom(preset) {
  const query = new URLSearchParams({algorithm: note.dataset.algorithm, env_id: environment.value, preset});
  const mine = ++asked;
  const response = await fetch(`${note.dataset.url}?${query}`, {headers: {Accept: "application/json"}});
  if (!response.ok || mine !== asked) return;  // a bad id is the form's to report; a later answer wins
  const answer = await response.json();
  for (const [name, value] of Object.entries(answer.values)) {
    const field = form.elements[`hp_${name}`];
    if (field && !changedByTheUser(field)) show(field, value);
  }
  if (answer.preset && answer.preset.total_steps && totalSteps && !changedByTheUser(totalSteps)) {
    show(totalSteps, String(Math.min(answer.preset.total_steps, Number(totalSteps.max) || Infinity)));
  }
  if (answer.default_name && nameIsTheDefault()) nameField.value = nameField.dataset.defaultName = answer.default_name;
  presetField.value = answer.preset ? answer.preset.name : "none";
  describe(answer);
}

if (algorithm) algorithm.addEventListener("change", reloadWithTheAlgorithm);
if (algorithm && note && presetField) {
  if (environment) environment.addEventListener("change", () => startFrom("auto"));
  note.addEventListener("click", (event) => {
    const button = event.target.closest("[data-preset]");
    if (button) startFrom(button.dataset.preset);
  });
}
