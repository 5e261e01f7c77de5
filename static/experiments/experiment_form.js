// The experiment form: the hyperparameter fields belong to the chosen algorithm, so choosing another
// one reloads the new-experiment form with that algorithm's fields (and defaults), keeping what was
// typed above them (also on a clone, whose form posts to the same address).
(function () {
  "use strict";

  const algorithm = document.getElementById("id_algorithm");
  if (!algorithm) return;
  algorithm.addEventListener("change", () => {
    const query = new URLSearchParams();
    for (const field of algorithm.form.elements) {
      if (field.name && !field.name.startsWith("hp_") && field.name !== "csrfmiddlewaretoken") {
        query.set(field.name, field.value);
      }
    }
    window.location.assign(`${new URL(algorithm.form.action).pathname}?${query}`);
  });
})();
