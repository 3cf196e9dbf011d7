export declare const name: any;
export declare const version: any;
