// The run page's live log: the lines `loopd logs -f RUN` prints, pushed by the console as
// server-sent events. The stream starts from the transcript's top, so its first lines replace
// what the page showed when it was loaded. Plain text only: nothing sent is read as HTML.
(function () {
  "use strict";
  var state = document.getElementById("live-state");
  var log = document.getElementById("log");
  if (!state || !log || !window.EventSource) {
    return;
  }
  var source = new EventSource(state.getAttribute("data-live"));
  var fresh = true;
  source.addEventListener("open", function () {
    fresh = true; // a stream opened again starts from the top again
  });
  source.onmessage = function (event) {
    var atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
    if (fresh) {
      log.textContent = "";
      fresh = false;
      state.textContent = "running: following live";
    }
    log.appendChild(document.createTextNode(event.data + "\n"));
    if (atBottom) {
      window.scrollTo(0, document.body.scrollHeight);
    }
  };
  source.onerror = function () {
    if (source.readyState === EventSource.CONNECTING) {
      state.textContent = "running: connecting again to follow it";
    }
  };
  source.addEventListener("end", function (event) {
    source.close();
    state.textContent = event.data;
    state.setAttribute("data-ended", "yes");
  });
})();
