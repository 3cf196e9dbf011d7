import { DynamicBuffer } from '@platformatic/dynamic-buffer';
export declare function prepareInput(data: Buffer | Uint8Array | DynamicBuffer): void;
export declare function prepareOutput(combined: bigint): Buffer;
export declare function crc32c(data: Buffer | Uint8Array | DynamicBuffer): number;
export declare function lz4Compress(data: Buffer | DynamicBuffer): Buffer;
export declare function lz4Decompress(data: Buffer | DynamicBuffer): Buffer;
export declare function snappyCompress(data: Buffer | DynamicBuffer): Buffer;
export declare function snappyDecompress(data: Buffer | DynamicBuffer): Buffer;
