document.body.textContent = "hello from webpack";
