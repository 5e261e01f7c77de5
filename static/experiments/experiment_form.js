// The experiment form: the hyperparameter fields belong to the chosen algorithm, so choosing another
// one reloads the form with that algorithm's fields (and its defaults).
(function () {
  "use strict";

  const algorithm = document.getElementById("id_algorithm");
  if (!algorithm) return;
  algorithm.addEventListener("change", () => {
    const url = new URL(window.location.href);
    url.searchParams.set("algorithm", algorithm.value);
    window.location.assign(url);
  });
})();
