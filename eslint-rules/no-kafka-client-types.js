/**
 * No value outside src/kafka may have a Kafka client library's type: the import rule sees only
 * imports, and a type handed on by src/kafka (an alias, a return type, a callback's parameter)
 * reaches a role without any import. Checked with the type checker on what a file declares,
 * calls and reads: variables, parameters, class properties, call results and the objects of
 * member accesses, and the types those are built from (unions, type arguments such as
 * `Promise<Admin>`, what a function returns); a callback's parameters are parameters too.
 */
const LIBRARY = /[\\/]node_modules[\\/](kafkajs|@platformatic[\\/]kafka)[\\/]/;

export default {
  meta: {
    type: 'problem',
    docs: { description: 'no Kafka client library type outside src/kafka' },
    messages: {
      leak: "'{{name}}' has a type of {{library}} ({{type}}): only src/kafka knows a Kafka client library; use its ports",
    },
    schema: [],
  },
  create(context) {
    const services = context.sourceCode.parserServices;
    if (!services?.program)
      throw new Error('no-kafka-client-types needs type information (parserOptions.projectService)');
    const checker = services.program.getTypeChecker();
    const reported = new Set();

    /** The library declaring `type` or a type it is built from (depth-bounded), if any. */
    function libraryType(type, depth = 0, seen = new Set()) {
      if (!type || depth > 3 || seen.has(type)) return undefined;
      seen.add(type);
      for (const symbol of [type.aliasSymbol, type.getSymbol()]) {
        for (const declaration of symbol?.getDeclarations() ?? []) {
          const match = LIBRARY.exec(declaration.getSourceFile().fileName);
          if (match) return { library: match[1].replace('\\', '/'), type: checker.typeToString(type) };
        }
      }
      const parts = [
        ...(type.isUnionOrIntersection() ? type.types : []),
        ...(type.aliasTypeArguments ?? []),
        ...(checker.getTypeArguments && type.target ? checker.getTypeArguments(type) : []),
      ];
      // What a function returns; not what it takes (src/kafka's functions also take a test's own kafkajs client,
      // KafkaSource).
      for (const signature of type.getCallSignatures()) parts.push(checker.getReturnTypeOfSignature(signature));
      for (const part of parts) {
        const found = libraryType(part, depth + 1, seen);
        if (found) return found;
      }
      return undefined;
    }

    function check(node, name) {
      if (!node || reported.has(node)) return;
      const found = libraryType(checker.getTypeAtLocation(services.esTreeNodeToTSNodeMap.get(node)));
      if (!found) return;
      reported.add(node);
      context.report({ node, messageId: 'leak', data: { name, ...found } });
    }
    const text = (node) => context.sourceCode.getText(node).slice(0, 60);

    return {
      VariableDeclarator: (node) => check(node.id, text(node.id)),
      'FunctionDeclaration, FunctionExpression, ArrowFunctionExpression, TSDeclareFunction'(node) {
        for (const param of node.params)
          check(param.type === 'TSParameterProperty' ? param.parameter : param, text(param));
      },
      PropertyDefinition: (node) => check(node.key, text(node.key)),
      CallExpression: (node) => check(node, text(node.callee)),
      NewExpression: (node) => check(node, text(node.callee)),
      MemberExpression: (node) => check(node.object, text(node.object)),
    };
  },
};
