"use strict";
// The page that answers ?token= to a link from another site: move on to the address without the
// token (and with the link's #tab), replacing this history entry so the token's address does not
// stay in the history.
location.replace(document.getElementById("onward").href + location.hash);
