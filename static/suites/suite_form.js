// The new-suite form: choosing a named list of environments writes its ids into the environments field.
const lists = JSON.parse(document.getElementById("env-lists").textContent);
const choice = document.getElementById("id_env_list");
const ids = document.getElementById("id_env_ids");
const source = document.getElementById("env-list-source");

function showSource() {
  const list = lists[choice.value];
  source.textContent = list ? `Source: ${list.source}` : "";
}

choice.addEventListener("change", () => {
  const list = lists[choice.value];
  if (list) ids.value = list.ids.join("\n");
  showSource();
});
if (!ids.value.trim() && lists[choice.value]) ids.value = lists[choice.value].ids.join("\n");
showSource();
