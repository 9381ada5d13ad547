/*
 * The upload form: POST /api/tasks with upload progress, the form's idempotency key
 * (one task however often it is sent) and the CSRF token; on success, go to the task.
 */
(function () {
  "use strict";

  var form = document.querySelector("form[data-upload]");
  if (!form) {
    return;
  }
  var button = form.querySelector("[data-upload-submit]");
  var files = form.querySelector("input[type=file][name=files]");
  var progress = form.querySelector("[data-upload-progress]");
  var state = form.querySelector("[data-upload-state]");
  var error = form.querySelector("[data-upload-error]");
  var sending = false;

  function newKey() {
    if (window.crypto && crypto.randomUUID) {
      return crypto.randomUUID();
    }
    return String(Date.now()) + "-" + String(Math.random()).slice(2);
  }

  // The files' own refusals are tied to their field (aria-invalid, aria-describedby), so a
  // screen reader says why when the field has the focus; other errors are the form's.
  var filesHelp = files.getAttribute("aria-describedby");

  function markFiles(invalid) {
    if (invalid) {
      files.setAttribute("aria-invalid", "true");
      files.setAttribute("aria-describedby", filesHelp + " " + error.id);
    } else {
      files.removeAttribute("aria-invalid");
      files.setAttribute("aria-describedby", filesHelp);
    }
  }

  function showError(message, aboutFiles) {
    error.textContent = message;
    error.hidden = false;
    markFiles(Boolean(aboutFiles));
  }

  var maxFiles = Number(form.dataset.maxFiles);
  var maxFileBytes = Number(form.dataset.maxFileBytes);
  var maxRequestBytes = Number(form.dataset.maxRequestBytes);
  var accepted = files.accept.split(",");

  function megabytes(bytes) {
    return (bytes / (1024 * 1024)).toLocaleString(undefined, { maximumFractionDigits: 1 }) + " MB";
  }

  // Return why the server would refuse these files, in words, or "" when it would not.
  function refuse(chosen) {
    if (!chosen.length) {
      return "Choose at least one file to upload.";
    }
    if (chosen.length > maxFiles) {
      return "Choose at most " + maxFiles + " files (you chose " + chosen.length + ").";
    }
    var total = 0;
    for (var i = 0; i < chosen.length; i++) {
      var file = chosen[i];
      var dot = file.name.lastIndexOf(".");
      var extension = dot >= 0 ? file.name.slice(dot).toLowerCase() : "";
      if (accepted.indexOf(extension) < 0) {
        return file.name + ": only " + accepted.join(" ") + " files are accepted.";
      }
      if (file.size === 0) {
        return file.name + " is empty.";
      }
      if (file.size > maxFileBytes) {
        return file.name + " is " + megabytes(file.size) + ", over the limit of " + megabytes(maxFileBytes) + " a file.";
      }
      total += file.size;
    }
    if (total > maxRequestBytes) {
      return "The files add up to " + megabytes(total) + ", over the limit of " + megabytes(maxRequestBytes) + " in all.";
    }
    return "";
  }

  files.addEventListener("change", function () {
    var refusal = refuse(files.files);
    error.hidden = !refusal;
    error.textContent = refusal;
    markFiles(Boolean(refusal));
  });

  function done() {
    sending = false;
    button.disabled = false;
    progress.hidden = true;
    state.textContent = "";
  }

  // A page restored from the back/forward cache is a new form: it gets a new key.
  window.addEventListener("pageshow", function (event) {
    if (event.persisted) {
      form.dataset.idempotencyKey = newKey();
      done();
    }
  });

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (sending) {
      return; // a double click: the first request is on its way
    }
    error.hidden = true;
    markFiles(false);
    var refusal = refuse(files.files);
    if (refusal) {
      // Said before a byte is sent; the server checks the same limits again.
      showError(refusal, true);
      files.focus();
      return;
    }
    sending = true;
    button.disabled = true;
    var submittedAt = performance.timeOrigin + performance.now();
    var csrf = form.querySelector("[name=csrfmiddlewaretoken]").value;

    var xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.responseType = "json";
    xhr.setRequestHeader("Accept", "application/json");
    xhr.setRequestHeader("X-CSRFToken", csrf);
    xhr.setRequestHeader("Idempotency-Key", form.dataset.idempotencyKey);

    progress.value = 0;
    progress.hidden = false;
    state.textContent = "Uploading…";
    xhr.upload.addEventListener("progress", function (e) {
      if (e.lengthComputable) {
        var percent = Math.round((e.loaded / e.total) * 100);
        progress.value = percent;
        state.textContent = "Uploading… " + percent + " %";
      }
    });
    xhr.upload.addEventListener("load", function () {
      progress.value = 100;
      state.textContent = "Checking the files…";
    });

    xhr.addEventListener("load", function () {
      var body = xhr.response || {};
      if ((xhr.status === 201 || xhr.status === 200) && body.url) {
        if (xhr.getResponseHeader("Reused-Result") === "true") {
          // The same documents made a report earlier: show it, with a way to write a new one.
          window.location.assign(body.url + "?reused=1");
          return;
        }
        state.textContent = "Starting the report…";
        try {
          window.sessionStorage.setItem(
            "reportline:submitted:" + body.task_id,
            String(submittedAt)
          );
        } catch (e) {
          // Private modes may refuse storage; the timing is then simply not reported.
        }
        window.location.assign(body.url);
        return;
      }
      done();
      var message = body.error && body.error.message;
      var code = body.error && body.error.code;
      var aboutFiles = code === "file_too_large" || code === "unsupported_media_type";
      if (xhr.status === 422) {
        // This form's key already made a task from other files: the next send is new.
        form.dataset.idempotencyKey = newKey();
        message = "This form was already used for a different upload. Press the button again to send these files as a new report.";
      } else if (xhr.status === 402) {
        message = (message || "Your budget is used up.") + " Nothing was kept or charged.";
      } else if (xhr.status === 429 && !message) {
        // The server's own words say when to try again; without them, its header does.
        var wait = xhr.getResponseHeader("Retry-After");
        message = "Too many reports for now." + (wait ? " Try again in " + wait + " s." : "");
      } else if (xhr.status === 401 || xhr.status === 403) {
        message = (message || "You are not logged in.") + " Reload the page and log in again.";
      }
      showError(message || "The upload failed (HTTP " + xhr.status + "). Try again.", aboutFiles);
    });
    xhr.addEventListener("error", function () {
      done();
      showError("The upload did not reach the server. Check your connection and try again.");
    });
    xhr.addEventListener("abort", done);

    xhr.send(new FormData(form));
  });
})();
