//! Hyprland IPC client.
