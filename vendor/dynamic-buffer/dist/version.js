export const name = "@platformatic/dynamic-buffer";
export const version = "0.3.1";
