export const INT8_SIZE = 1;
export const INT16_SIZE = 2;
export const INT32_SIZE = 4;
export const INT64_SIZE = 8;
export const EMPTY_BUFFER = Buffer.alloc(0);
