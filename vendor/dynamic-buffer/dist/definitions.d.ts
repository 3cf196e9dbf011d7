export declare const INT8_SIZE = 1;
export declare const INT16_SIZE = 2;
export declare const INT32_SIZE = 4;
export declare const INT64_SIZE = 8;
export declare const EMPTY_BUFFER: Buffer<ArrayBuffer>;
