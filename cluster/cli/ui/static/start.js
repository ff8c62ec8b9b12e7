"use strict";
// Last of the page's scripts: every page has registered itself. (A file, not an inline script: the
// Content-Security-Policy allows only scripts served by the dashboard itself.)
ts.start();
