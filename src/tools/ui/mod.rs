//! `ui_read` and `ui_act`: the focused window's controls over AT-SPI.
