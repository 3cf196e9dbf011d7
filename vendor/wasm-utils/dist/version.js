export const name = "@platformatic/wasm-utils";
export const version = "0.2.1";
